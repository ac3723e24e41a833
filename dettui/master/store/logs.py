"""Task log lines."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from dettui.master.effects import Done, notify
from dettui.master.store.records import LogLine, columns
from dettui.master.store.tx import command, step, transaction

FROM_LOGS = f"SELECT {columns(LogLine.COLUMNS)} FROM logs"


@dataclass(frozen=True)
class LogFilter:
    rank_ids: tuple[int, ...] = ()
    stdtypes: tuple[str, ...] = ()
    levels: tuple[str, ...] = ()
    agent_ids: tuple[str, ...] = ()
    container_ids: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    search_text: str | None = None
    timestamp_before: float | None = None
    timestamp_after: float | None = None


@command
def insert(conn: sqlite3.Connection, lines: list[dict[str, Any]]) -> Done[int]:
    """Insert log lines (dicts with the column names); how many were stored, and the
    followers of their trials' logs told. A line whose allocation, agent and sequence number
    are stored already (an agent's retry) is not stored again. A NUL character, which
    PostgreSQL's text cannot hold, is kept as U+FFFD (as the agent keeps bytes that are not
    UTF-8), on either database."""
    if not lines:
        return Done(0)
    with transaction(conn):
        stored = insert_in(conn, lines)
    return Done(stored, notify(*dict.fromkeys(f"logs:{line['trial_id']}" for line in lines)))


@step
def insert_in(conn: sqlite3.Connection, lines: list[dict[str, Any]]) -> int:
    """`insert` inside a transaction the caller holds."""
    cols = ("trial_id", "task_id", "allocation_id", "agent_id", "container_id", "rank_id",
            "stdtype", "source", "level", "timestamp", "log", "seq")
    cur = conn.executemany(
        f"INSERT INTO logs ({', '.join(cols)}) "
        f"VALUES ({','.join('?' * len(cols))}) ON CONFLICT DO NOTHING",
        [tuple(line["log"].replace("\x00", "\ufffd") if c == "log" else line.get(c)
               for c in cols) for line in lines],
    )
    return max(cur.rowcount, 0)  # the lines inserted: not those ignored


def _where(trial_id: int, flt: LogFilter) -> tuple[str, list[Any]]:
    where, args = ["trial_id=?"], [trial_id]  # type: ignore[list-item]
    for col, values in (("rank_id", flt.rank_ids), ("stdtype", flt.stdtypes),
                        ("level", flt.levels), ("agent_id", flt.agent_ids),
                        ("container_id", flt.container_ids), ("source", flt.sources)):
        if values:
            where.append(f"{col} IN ({','.join('?' * len(values))})")
            args.extend(values)
    if flt.search_text:
        where.append("replace(log, ?, '') != log")  # contains it (in SQLite and PostgreSQL)
        args.append(flt.search_text)
    if flt.timestamp_before is not None:
        where.append("timestamp < ?")
        args.append(flt.timestamp_before)
    if flt.timestamp_after is not None:
        where.append("timestamp > ?")
        args.append(flt.timestamp_after)
    return " AND ".join(where), args


def fetch(
    conn: sqlite3.Connection, trial_id: int, flt: LogFilter, *, after_id: int = 0,
    limit: int = 0, descending: bool = False, before_id: int = 0,
) -> list[LogLine]:
    """The trial's lines that pass `flt`, by id (newest first if `descending`), only those
    after `after_id` and (if given) before `before_id`: a page's cursor, which (unlike a
    timestamp) no two lines share."""
    where, args = _where(trial_id, flt)
    if after_id:
        where += " AND id > ?"
        args.append(after_id)
    if before_id:
        where += " AND id < ?"
        args.append(before_id)
    sql = f"{FROM_LOGS} WHERE {where} ORDER BY id {'DESC' if descending else 'ASC'}"
    if limit > 0:
        sql += f" LIMIT {int(limit)}"
    return [LogLine.from_row(r) for r in conn.execute(sql, args)]
