"""The store's connection (SQLite in WAL mode, or PostgreSQL: store/pg.py), numbered
migrations, and the single store thread.

Every store call that may write runs on one dedicated thread (`Database.call`), so the event
loop never blocks on the database and writes are serialised. A change is committed before the
call returns, so anything the master acknowledges survives a SIGKILL.

Reads that change nothing and need none of the store connection's kept state (lists, pages,
one object, a context download) can run on a reader connection instead (`Database.read`): on
SQLite, READERS connections in WAL mode, each read in one snapshot, on a thread of their own,
so a page never waits behind a burst of creations or metric batches on the store thread. They
are opened query-only: a read that writes fails. One reader, not two: reads are Python work
under the GIL, so two at once each took twice as long (the whole job queue at lab scale, 370
-> 790 ms) and the pages' p99s were no better.

The stream's feeds re-read their topics after changes (a 500-job window: ~25 ms, up to a third
of the time each while the cluster churns). Their reads (made in a task that set `READ_LANE`
to FEEDS) go to a reader connection and thread of their own, so a page a user asked for
never waits in line behind them; the two share the GIL instead. A feed's re-read of the few
objects a change named (FEW) has a third: at lab scale the feeds' reader is busy 25-70 ms at a
time with whole reads of the job window and the agents, and a changed experiment's diff waited
behind them (most of the stream's p99 of ~100 ms).

A full disk is not an internal error: a store call that fails because the filesystem of the
state dir is full (SQLite's SQLITE_FULL, ENOSPC or EDQUOT; PostgreSQL's disk_full) raises
`StorageFull` naming the state dir and its filesystem, a 503 with a Retry-After, so new work
is refused with that sentence and what agents and trials send is sent again once space returns.
The transaction rolled back whole (tx.py), so the retry stores it exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import logging
import queue
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import ParamSpec, TypeVar, cast

from dettui.errors import StorageFull
from dettui.master.disk import free_bytes, full_disk, is_full
from dettui.master.store import callers, pg, tx

log = logging.getLogger("dettui.master")

P = ParamSpec("P")
T = TypeVar("T")
READERS = 1  # reader connections (and threads) of a SQLite store: see below
# Which reader a read made in this context goes to (see above): PAGES (the default), FEEDS (a
# stream feed's task sets it), FEW (a feed's re-read of the objects a change named: `lane`).
PAGES, FEEDS, FEW = "pages", "feeds", "few"
READ_LANE: contextvars.ContextVar[str] = contextvars.ContextVar("dettui_read_lane",
                                                                default=PAGES)


@contextlib.contextmanager
def lane(name: str) -> Iterator[None]:
    """Reads made inside go to the reader of lane `name` (FEEDS or FEW; PAGES: the pool)."""
    token = READ_LANE.set(name)
    try:
        yield
    finally:
        READ_LANE.reset(token)


SQLITE_FULL, SQLITE_IOERR = 13, 10  # primary result codes (the low byte of an extended one)
PG_DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full
NEARLY_FULL = 1 << 20  # bytes free under which an I/O error of the store means a full disk


def storage_full(exc: BaseException, target: Path | str) -> StorageFull | None:
    """`StorageFull` if `exc`, raised by a store call on `target`, says the disk is full; else
    None (the error is something else)."""
    if isinstance(exc, StorageFull):
        return exc
    if pg.is_url(target):
        if getattr(exc, "sqlstate", None) != PG_DISK_FULL:
            return None
        return StorageFull(f"the disk of the master's PostgreSQL server is full ({exc}); "
                           "nothing was stored: free space on its server and try again")
    folder = Path(target).parent
    if isinstance(exc, sqlite3.Error):
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        full = code == SQLITE_FULL or (code == SQLITE_IOERR
                                       and 0 <= free_bytes(folder) < NEARLY_FULL)
    else:
        full = is_full(exc)
    return full_disk(folder) if full else None




def _migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("dettui.master.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), name, entry.read_text()))
    return sorted(found)


def connect(target: Path | str) -> sqlite3.Connection:
    """Open (creating if needed) the store at `target`, a SQLite file or a PostgreSQL URL, and
    bring its schema up to date. A PostgreSQL connection has the part of sqlite3's surface the
    store's functions use (store/pg.py), hence the type they are written against."""
    if pg.is_url(target):
        return cast(sqlite3.Connection, pg.connect(str(target)))
    conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None,
                           factory=tx.Connection)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    migrate(conn)
    return conn


def open_reader(target: Path | str) -> sqlite3.Connection:
    """A query-only connection to the SQLite store at `target` (already migrated)."""
    conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA query_only=ON")
    return conn


def _sha256_hex(value: str | None) -> str | None:
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every numbered migration above the stored `user_version`; return the new version."""
    conn.create_function("sha256_hex", 1, _sha256_hex, deterministic=True)  # migration 0017
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    for number, _name, sql in _migrations():
        if number <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current = number
    return int(current)


def _split(sql: str) -> list[str]:
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def open_master(target: Path | str) -> sqlite3.Connection:
    """`connect` for the master: on PostgreSQL, first the database's master lock (the state
    dir's lock keeps one master per SQLite file)."""
    if not pg.is_url(target):
        return connect(target)
    conn = pg.Connection(str(target))
    try:
        pg.lock_master(conn)
        pg.migrate(conn)
    except BaseException:
        conn.close()
        raise
    return cast(sqlite3.Connection, conn)


def _snapshot(conn: sqlite3.Connection, fn: Callable[..., T], args: tuple[object, ...],
              kwargs: dict[str, object]) -> T:
    """`fn(conn, ...)` in one read transaction (one snapshot) of a reader connection."""
    conn.execute("BEGIN")
    try:
        return fn(conn, *args, **kwargs)
    finally:
        conn.execute("COMMIT")  # the snapshot ends; query-only, so nothing to commit


class Database:
    """Owns the store connection and the one thread that touches it, and the reader
    connections (SQLite) with their threads."""

    def __init__(self, target: Path | str) -> None:
        self.target = target
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dettui-store")
        try:
            self.conn = self._executor.submit(open_master, target).result()
        except BaseException as exc:
            self._executor.shutdown(wait=False)
            full = storage_full(exc, target)
            if full is None:
                raise
            if not pg.is_url(target):  # the master cannot start: say why in one sentence
                full = full_disk(Path(target).parent, "its store cannot open (SQLite needs "
                                 "room for its shared-memory and log files). Free space there "
                                 "and start it again")
            raise full from exc
        tx.adopt_plan(self.conn)  # tests only: a simulated crash at a planned commit
        self.callers = self._executor.submit(callers.watch, self.conn).result()
        # Reader connections, opened after the store's migrations; none on PostgreSQL (its
        # reads go to the store thread, as its writes do).
        self.readers: list[sqlite3.Connection] = []
        # the other lanes: a connection each, touched only by its own thread
        self._lanes: dict[str, tuple[ThreadPoolExecutor, sqlite3.Connection]] = {}
        if isinstance(self.conn, sqlite3.Connection):
            self.readers = [open_reader(target) for _ in range(READERS)]
            self._lanes = {name: (ThreadPoolExecutor(max_workers=1,
                                                     thread_name_prefix=f"dettui-{name}"),
                                  open_reader(target)) for name in (FEEDS, FEW)}
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        for reader in self.readers:
            self._idle.put(reader)
        self._reading = ThreadPoolExecutor(max_workers=max(1, len(self.readers)),
                                           thread_name_prefix="dettui-reader")

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor,
                                              functools.partial(fn, *args, **kwargs))
        except Exception as exc:
            full = storage_full(exc, self.target)
            if full is None:
                raise
            raise full from exc

    async def run(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run a store function `fn(conn, *args, **kwargs)` on the store thread. Not a store
        command (`tx.command`): its effects would be dropped; the dispatcher runs those."""
        if getattr(fn, "store_command", False):
            raise TypeError(f"{fn.__qualname__} is a store command: run it with the "
                            "dispatcher (Dispatcher.run), which performs its effects")
        return await self.call(fn, self.conn, *args, **kwargs)

    async def command(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run a store command on the store thread (for the dispatcher: `Dispatcher.run`)."""
        return await self.call(fn, self.conn, *args, **kwargs)

    async def read(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run a store function that only reads, `fn(conn, *args, **kwargs)`, on a reader
        connection in one snapshot (what was committed when it began); on PostgreSQL, `run`."""
        if not self.readers:
            return await self.run(fn, *args, **kwargs)
        loop = asyncio.get_running_loop()
        own = self._lanes.get(READ_LANE.get())
        if own is not None:
            executor, conn = own
            return await loop.run_in_executor(
                executor, functools.partial(_snapshot, conn, fn, args, kwargs))
        return await loop.run_in_executor(
            self._reading, functools.partial(self._read, fn, args, kwargs))

    def _read(self, fn: Callable[..., T], args: tuple[object, ...],
              kwargs: dict[str, object]) -> T:
        conn = self._idle.get()  # as many connections as threads: never waits
        try:
            return _snapshot(conn, fn, args, kwargs)
        finally:
            self._idle.put(conn)

    def run_sync(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """The same, from outside the event loop (start-up, tests)."""
        return self._executor.submit(functools.partial(fn, self.conn, *args, **kwargs)).result()

    def close(self) -> None:
        def _close() -> None:
            if isinstance(self.conn, sqlite3.Connection):
                try:  # on a full disk the WAL stays: the next start replays it
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.OperationalError as exc:
                    log.warning("the store's WAL was not copied back at exit: %s", exc)
            self.conn.close()

        self._reading.shutdown(wait=True)
        for executor, _ in self._lanes.values():
            executor.shutdown(wait=True)
        for reader in [*self.readers, *(conn for _, conn in self._lanes.values())]:
            reader.close()
        self._executor.submit(_close).result()
        self._executor.shutdown(wait=True)
