"""Slot usage from allocation history, as Determined's `resources` endpoints report it: one
CSV row per allocation (its slot-hours within the range asked), and slot-seconds per UTC day
or month split by user, experiment label and resource pool. Pure: the store's rows and `now`
in, rows out."""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class AllocationUse:
    """One allocation as the usage reports see it."""

    allocation_id: str
    experiment_id: int
    username: str
    labels: tuple[str, ...]
    pool: str
    slots: int  # on every node together
    start: float
    end: float | None  # None: still running

WORKSPACE = "Uncategorized"  # dettui has one workspace; Determined names its default so
ALLOCATION_HEADER = ["allocation_id", "task_type", "username", "workspace_name", "experiment_id",
                     "slots", "start_time", "end_time", "imagepulling_time", "slot_hours",
                     "resource_pool"]
AGGREGATED_HEADER = ["aggregation_type", "aggregation_key", "date", "seconds"]
DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"
MAX_PERIODS = 3660  # days (ten years) or months in one aggregated answer


def _stamp(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def overlap(use: AllocationUse, start: float, end: float, now: float) -> float:
    """Seconds `use` held its slots within [start, end] (a running one: until `now`)."""
    until = use.end if use.end is not None else max(now, use.start)
    return max(min(until, end) - max(use.start, start), 0.0)


def allocation_rows(uses: Iterable[AllocationUse], start: float, end: float,
                    now: float) -> list[list[str]]:
    """`det resources allocations`: Determined's columns, one row per allocation."""
    rows = []
    for u in uses:
        hours = overlap(u, start, end, now) * u.slots / 3600.0
        rows.append([u.allocation_id, "TRIAL", u.username, WORKSPACE, str(u.experiment_id),
                     str(u.slots), _stamp(u.start), _stamp(u.end), "0.0",
                     f"{hours:f}" if hours else "0.0", u.pool])
    return rows


def periods(first: date, last: date, monthly: bool) -> list[tuple[date, date]]:
    """[start, next start) of each day (or month) from `first` to `last`, both included."""
    out: list[tuple[date, date]] = []
    day = first.replace(day=1) if monthly else first
    while day <= last and len(out) < MAX_PERIODS:
        if monthly:
            following = day + timedelta(days=calendar.monthrange(day.year, day.month)[1])
        else:
            following = day + timedelta(days=1)
        out.append((day, following))
        day = following
    return out


def _epoch(d: date) -> float:
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()


def aggregated(uses: list[AllocationUse], first: date, last: date, monthly: bool,
               now: float) -> list[dict[str, Any]]:
    """Determined's ResourceAllocationAggregatedEntry for each period with any use (only the
    days the uses span are looked at: a range of a century costs no more than its data)."""
    if not uses:
        return []
    first = max(first, datetime.fromtimestamp(min(u.start for u in uses), UTC).date())
    last = min(last, datetime.fromtimestamp(
        max(u.end if u.end is not None else max(now, u.start) for u in uses), UTC).date())
    entries = []
    for begin, following in periods(first, last, monthly):
        start, end = _epoch(begin), _epoch(following)
        by_user: dict[str, float] = {}
        by_label: dict[str, float] = {}
        by_pool: dict[str, float] = {}
        total = 0.0
        for u in uses:
            seconds = overlap(u, start, end, now) * u.slots
            if seconds <= 0:
                continue
            total += seconds
            by_user[u.username] = by_user.get(u.username, 0.0) + seconds
            by_pool[u.pool] = by_pool.get(u.pool, 0.0) + seconds
            for label in u.labels:
                by_label[label] = by_label.get(label, 0.0) + seconds
        if total > 0:
            entries.append({
                "periodStart": begin.strftime("%Y-%m" if monthly else "%Y-%m-%d"),
                "period": MONTHLY if monthly else DAILY, "seconds": total,
                "byUsername": by_user, "byExperimentLabel": by_label,
                "byResourcePool": by_pool, "byAgentLabel": {}})
    return entries


def aggregated_rows(entries: list[dict[str, Any]]) -> list[list[str]]:
    """The CSV of `aggregated` entries: Determined's rows, label, user, pool, then total."""
    rows = []
    for e in entries:
        for kind, key in (("experiment_label", "byExperimentLabel"),
                          ("username", "byUsername"), ("resource_pool", "byResourcePool")):
            rows += [[kind, name, e["periodStart"], f"{s:f}"] for name, s in e[key].items()]
        rows.append(["total", "total", e["periodStart"], f"{e['seconds']:f}"])
    return rows
