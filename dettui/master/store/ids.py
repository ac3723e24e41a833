"""Ids users see (experiments, trials) are never given twice, even after a delete: SQLite hands
out MAX(id) + 1, so deleting the newest experiment would give its id to the next one. The last
id given is kept in the `cluster` table and moves with every insert (inside its transaction)."""

from __future__ import annotations

import sqlite3

TABLES = ("experiments", "trials")


def next_id(conn: sqlite3.Connection, table: str) -> int:
    """The id for a new row of `table` (inside the inserting transaction)."""
    assert table in TABLES
    key = f"last_id:{table}"
    row = conn.execute("SELECT value FROM cluster WHERE key=?", (key,)).fetchone()
    biggest = conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()[0]
    new = max(int(row[0]) if row else 0, int(biggest)) + 1
    conn.execute("INSERT INTO cluster (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                 "SET value=excluded.value", (key, str(new)))
    return new
