"""SQLite connection in WAL mode, numbered migrations, and the single store thread.

Every store call runs on one dedicated thread (`Database.call`), so the event loop never blocks
on SQLite and writes are serialised. A change is committed before the call returns, so anything
the master acknowledges survives a SIGKILL.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import ParamSpec, TypeVar

from dettui.master.store import tx

P = ParamSpec("P")
T = TypeVar("T")


def _migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("dettui.master.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), name, entry.read_text()))
    return sorted(found)


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the store at `path` and bring its schema up to date."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                           factory=tx.Connection)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    migrate(conn)
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


class Database:
    """Owns the connection and the one thread that touches it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dettui-store")
        self.conn = self._executor.submit(connect, path).result()
        tx.adopt_plan(self.conn)  # tests only: a simulated crash at a planned commit

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def run(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run a store function `fn(conn, *args, **kwargs)` on the store thread."""
        return await self.call(fn, self.conn, *args, **kwargs)

    def run_sync(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """The same, from outside the event loop (start-up, tests)."""
        return self._executor.submit(functools.partial(fn, self.conn, *args, **kwargs)).result()

    def close(self) -> None:
        def _close() -> None:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.close()

        self._executor.submit(_close).result()
        self._executor.shutdown(wait=True)
