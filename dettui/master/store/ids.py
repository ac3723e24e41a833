"""Ids users see (experiments, trials) are never given twice, even after a delete: SQLite hands
out MAX(id) + 1, so deleting the newest experiment would give its id to the next one. The last
id given is kept in the `cluster` table and moves with every insert (inside its transaction)."""

from __future__ import annotations

import sqlite3

TABLES = ("experiments", "trials")


def next_id(conn: sqlite3.Connection, table: str) -> int:
    """The id for a new row of `table` (inside the inserting transaction)."""
    return next_ids(conn, table, 1)[0]


def next_ids(conn: sqlite3.Connection, table: str, n: int) -> list[int]:
    """Ids for `n` new rows of `table`, in one read and one write of the last id given (an
    experiment's ten trials took thirty statements one by one; inside the inserting
    transaction)."""
    assert table in TABLES and n >= 0
    if n == 0:
        return []
    key = f"last_id:{table}"
    row = conn.execute("SELECT value FROM cluster WHERE key=?", (key,)).fetchone()
    biggest = conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()[0]
    first = max(int(row[0]) if row else 0, int(biggest)) + 1
    conn.execute("INSERT INTO cluster (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                 "SET value=excluded.value", (key, str(first + n - 1)))
    return list(range(first, first + n))
