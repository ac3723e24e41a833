"""Ids users see (experiments, trials) are never given twice, even after a delete: SQLite hands
out MAX(id) + 1, so deleting the newest experiment would give its id to the next one. The last
id given is kept in the `cluster` table and moves with every insert (inside its transaction)."""

from __future__ import annotations

import sqlite3

from dettui.master.store.tx import step

TABLES = ("experiments", "trials")


@step
def next_id(conn: sqlite3.Connection, table: str) -> int:
    """The id for a new row of `table` (inside the inserting transaction)."""
    return next_ids(conn, table, 1)[0]


@step
def next_ids(conn: sqlite3.Connection, table: str, n: int) -> list[int]:
    """Ids for `n` new rows of `table` (inside the inserting transaction)."""
    return reserve(conn, {table: n})[table]


@step
def reserve(conn: sqlite3.Connection, wanted: dict[str, int]) -> dict[str, list[int]]:
    """Ids for new rows of several tables at once (table -> how many), in one read and one
    write of the last ids given (an experiment and its ten trials took thirty statements one by
    one; inside the inserting transaction)."""
    assert set(wanted) <= set(TABLES) and all(n >= 0 for n in wanted.values())
    tables = [t for t, n in wanted.items() if n]
    out: dict[str, list[int]] = {t: [] for t in wanted}
    if not tables:
        return out
    keys = [f"last_id:{t}" for t in tables]
    given = dict(conn.execute(f"SELECT key, value FROM cluster WHERE key IN "
                              f"({','.join('?' * len(keys))})", keys).fetchall())
    biggest = conn.execute("SELECT " + ", ".join(f"(SELECT COALESCE(MAX(id), 0) FROM {t})"
                                                  for t in tables)).fetchone()
    last: list[tuple[str, str]] = []
    for table, key, big in zip(tables, keys, biggest, strict=True):
        first = max(int(given.get(key, 0)), int(big)) + 1
        out[table] = list(range(first, first + wanted[table]))
        last.append((key, str(first + wanted[table] - 1)))
    conn.execute("INSERT INTO cluster (key, value) VALUES "
                 + ",".join(["(?, ?)"] * len(last))
                 + " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                 [v for pair in last for v in pair])
    return out
