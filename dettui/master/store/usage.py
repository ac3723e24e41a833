"""Allocation history for `det resources allocations` and `det resources aggregated`: every
allocation that overlapped a time range, with whose it was and how many slots it held."""

from __future__ import annotations

import json
import sqlite3

from dettui.master.usage import AllocationUse

MAX_ROWS = 500_000  # allocations in one answer (a range wider than that is cut, oldest kept)


def between(conn: sqlite3.Connection, start: float, end: float) -> list[AllocationUse]:
    """Allocations that held their slots at some moment of [start, end], oldest first."""
    rows = conn.execute(
        "SELECT a.id, a.agent_id, a.slots, a.parts, a.start_time, a.end_time, "
        "e.id AS experiment_id, e.labels, e.resource_pool, u.username "
        "FROM allocations a JOIN trials t ON t.id = a.trial_id "
        "JOIN experiments e ON e.id = t.experiment_id JOIN users u ON u.id = e.owner_id "
        "WHERE a.start_time <= ? AND (a.end_time IS NULL OR a.end_time >= ?) "
        "ORDER BY a.start_time, a.id LIMIT ?", (end, start, MAX_ROWS)).fetchall()
    return [_use(r) for r in rows]


def _use(r: sqlite3.Row) -> AllocationUse:
    parts = json.loads(r["parts"]) or [[r["agent_id"], json.loads(r["slots"])]]
    labels = json.loads(r["labels"] or "[]")
    return AllocationUse(
        allocation_id=r["id"], experiment_id=r["experiment_id"], username=r["username"],
        labels=tuple(str(label) for label in labels), pool=r["resource_pool"],
        slots=sum(len(p[1]) for p in parts), start=r["start_time"], end=r["end_time"])
