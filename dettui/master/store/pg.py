"""The store on PostgreSQL (`dettui serve --db postgresql://...`): one asyncpg connection behind
the part of sqlite3's connection surface that the store's functions use, so that the same
synchronous functions run on either database, on the same single store thread.

The connection owns a private event loop: a call from a thread with no running loop (the store
thread) runs the query on it directly; a call from inside a running loop (a test's bare
connection) runs it on a helper thread. `?` placeholders become `$1, $2, ...` (cached per SQL
text). Statements keep sqlite3's results: rows by name or index, `rowcount` (summed over an
`executemany`), and `commit()` outside a transaction does nothing (every statement autocommits).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from dettui.errors import InvalidArgument, MasterRunning, Unavailable
from dettui.master.store.tx import CrashPlan

T = TypeVar("T")
SCHEMES = ("postgresql://", "postgres://")
# pg_try_advisory_lock's key (any fixed 64-bit number) for "the dettui master of this database":
# PostgreSQL keeps advisory locks per database.
MASTER_LOCK = 0x1F4C_9D3A_62B8_07E5
MIGRATE_LOCK = MASTER_LOCK + 1
_ROW_WORDS = ("SELECT", "WITH", "VALUES", "SHOW", "EXPLAIN")
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
ROWS, RETURNING, COMMAND = "rows", "returning", "command"  # what a statement gives back
# Errors of text PostgreSQL cannot hold (a NUL character, which SQLite stores).
_BAD_TEXT = (asyncpg.CharacterNotInRepertoireError, asyncpg.UntranslatableCharacterError)


def is_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(SCHEMES)


def redact(url: str) -> str:
    """`url` without its password (without its user too, if it cannot be parsed), fit for logs
    and messages."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        scheme, _, rest = url.partition("://")
        return f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else url
    if password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def check_url(url: str) -> None:
    """Refuse what is not a PostgreSQL URL, naming it without its password."""
    if not is_url(url):
        shown = redact(url) if "://" in url else "something else (not shown: it may hold a " \
            "password)"
        raise InvalidArgument(f"expected postgresql://USER@HOST:PORT/DB (a password is best "
                              f"in $DETTUI_DB), got {shown}")
    try:
        urlsplit(url).port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise InvalidArgument(f"not a valid database URL ({exc}): {redact(url)}") from exc


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> tuple[str, str]:
    """`sql` with `?` placeholders numbered for PostgreSQL (none inside quotes or comments),
    and what it gives back: ROWS (a query), RETURNING (rows of a change) or COMMAND."""
    out: list[str] = []
    n, i, quote = 0, 0, ""
    while i < len(sql):
        ch = sql[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = len(sql) if end < 0 else end
            out.append(sql[i:end])
            i = end
            continue
        elif ch == "?":
            n += 1
            out.append(f"${n}")
            i += 1
            continue
        out.append(ch)
        i += 1
    text = "".join(out)
    if _RETURNING.search(text):
        return text, RETURNING
    words = text.split(None, 1)
    return text, ROWS if words and words[0].upper() in _ROW_WORDS else COMMAND


def _count(status: str) -> int:
    """The row count of a command status (`UPDATE 3`, `INSERT 0 1`), else -1."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else -1


class Cursor:
    """The result of one statement, read like a sqlite3 cursor."""

    def __init__(self, rows: Sequence[asyncpg.Record], rowcount: int) -> None:
        self._rows = iter(rows)
        self.rowcount = rowcount

    def fetchone(self) -> asyncpg.Record | None:
        return next(self._rows, None)

    def fetchall(self) -> list[asyncpg.Record]:
        return list(self._rows)

    def __iter__(self) -> Iterator[asyncpg.Record]:
        return self._rows


class Connection:
    """One asyncpg connection with the surface of the store's sqlite3 connection."""

    dialect = "postgresql"
    crash_plan: CrashPlan | None = None

    def __init__(self, url: str) -> None:
        self.label = redact(url)
        self._loop = asyncio.new_event_loop()
        self._aside: ThreadPoolExecutor | None = None
        try:
            self._raw: asyncpg.Connection = self._run(_open(url))
        except BaseException:
            self._loop.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coro)
        if self._aside is None:  # called from inside a running loop (tests): not on it
            self._aside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dettui-pg")
        return self._aside.submit(self._loop.run_until_complete, coro).result()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        text, kind = translate(sql)
        return self._run(self._execute(text, kind, [tuple(args)]))

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> Cursor:
        text, kind = translate(sql)
        return self._run(self._execute(text, kind, [tuple(a) for a in seq]))

    async def _execute(self, text: str, kind: str, many: list[tuple[Any, ...]]) -> Cursor:
        """Run `text` once per argument tuple; the rows, and the rows changed in all (-1 for a
        query, as sqlite3 says)."""
        found: list[asyncpg.Record] = []
        count = -1
        try:
            for args in many:
                if kind == COMMAND:
                    n = _count(await self._raw.execute(text, *args))
                else:
                    rows = await self._raw.fetch(text, *args)
                    found += rows
                    n = len(rows) if kind == RETURNING else -1
                count = n if count < 0 else count + max(n, 0)
        except _BAD_TEXT as exc:
            raise InvalidArgument(f"text that PostgreSQL cannot store: {exc}") from exc
        return Cursor(found, count)

    def begin(self) -> None:
        self.execute("BEGIN")

    def commit(self) -> None:
        if self._raw.is_in_transaction():
            self.execute("COMMIT")

    def close(self) -> None:
        with contextlib.suppress(OSError, asyncpg.InterfaceError):
            self._run(self._raw.close(timeout=5))
        if self._aside is not None:
            self._aside.shutdown(wait=True)
        self._loop.close()


async def _open(url: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url, server_settings={
            "application_name": "dettui-master",
            # a master whose host vanished lets its lock go in about 30 s, not TCP's 2 hours
            "tcp_keepalives_idle": "15", "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3"})
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise Unavailable(f"cannot connect to the database {redact(url)}: "
                          f"{str(exc) or type(exc).__name__}") from exc
    except ValueError as exc:  # what asyncpg cannot make of the URL
        raise InvalidArgument(f"not a valid database URL ({exc}): {redact(url)}") from exc


def connect(url: str) -> Connection:
    """Open the store at `url` and bring its schema up to date (no master lock: see
    `lock_master`)."""
    conn = Connection(url)
    try:
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("dettui.master.store") / "migrations" / "postgres"
    found = [(int(e.name[:4]), e.name, e.read_text()) for e in folder.iterdir()
             if e.name.endswith(".sql") and e.name[:4].isdigit()]
    return sorted(found)


def migrate(conn: Connection) -> int:
    """Apply every numbered PostgreSQL migration above the stored version, each in its own
    transaction (two masters starting at once take turns); return the new version."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
    current = version(conn)
    for number, _name, sql in migrations():
        if number <= current:
            continue
        conn.begin()
        try:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATE_LOCK,))
            if version(conn) < number:
                conn.execute(sql)  # no parameters: the whole script in one round trip
                conn.execute("DELETE FROM schema_version")
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current = number
    return current


def version(conn: Connection) -> int:
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def lock_master(conn: Connection, patience: float = 5.0) -> None:
    """Take the database's master lock (held as long as the connection lives, let go by
    PostgreSQL when it ends, even with a killed master); refuse if another master holds it.
    A master just killed may hold it a moment longer: retried for `patience` seconds."""
    deadline = time.monotonic() + patience
    while not conn.execute("SELECT pg_try_advisory_lock(?)", (MASTER_LOCK,)).fetchone()[0]:
        if time.monotonic() > deadline:
            raise MasterRunning(
                f"another dettui master already uses the database {conn.label} (one master "
                "per database): stop it first, or give this one another database")
        time.sleep(0.1)
