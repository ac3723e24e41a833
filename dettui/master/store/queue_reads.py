"""What the scheduler reads of the queue, and which experiments changed since it last read.

A scheduling pass needs the live jobs and the first queued trials of each. At 10,000 queued
experiments reading them all took ~180 ms of the single store thread a pass, and while 100
agents exit trials passes run back to back. So the scheduler keeps the queue between passes
(`KeptQueue` in cluster/scheduling.py) and reads again only the experiments whose rows
changed: triggers on the store's own connection mark them, in the statement that changes them,
so no commit that moves a job in the queue can be missed, whichever store function made it. A
rolled back change marks too, which costs a read and no more.

PostgreSQL has no per-connection triggers here: there every pass reads the whole queue.
"""

from __future__ import annotations

import operator
import sqlite3
import time
from collections.abc import Collection
from dataclasses import dataclass

from dettui.master.store import trials
from dettui.master.store.experiments import live_jobs, live_where
from dettui.master.store.records import JOB_COLUMNS, Allocation, Job, columns, in_chunks
from dettui.models import ExperimentState, TrialState

FULL = 400  # more experiments to read than this: one read of the whole queue is cheaper
_STARTED = operator.attrgetter("start_time")
# What places an experiment in the queue: any change to these re-reads it.
_JOB_FIELDS = "state, unmanaged, job_id, resource_pool, priority, weight, max_slots, " \
              "queue_position, slots_per_trial"
_TRIGGERS = (
    "AFTER INSERT ON main.trials BEGIN SELECT dettui_waiting(NEW.experiment_id); END",
    "AFTER UPDATE OF state, experiment_id ON main.trials WHEN OLD.state IS NOT NEW.state "
    "OR OLD.experiment_id IS NOT NEW.experiment_id "
    "BEGIN SELECT dettui_waiting(OLD.experiment_id), dettui_waiting(NEW.experiment_id); END",
    "AFTER DELETE ON main.trials BEGIN SELECT dettui_waiting(OLD.experiment_id); END",
    "AFTER INSERT ON main.experiments BEGIN SELECT dettui_waiting(NEW.id); END",
    f"AFTER UPDATE OF {_JOB_FIELDS} ON main.experiments "
    "BEGIN SELECT dettui_waiting(OLD.id), dettui_waiting(NEW.id); END",
    "AFTER DELETE ON main.experiments BEGIN SELECT dettui_waiting(OLD.id); END",
    # and the live allocations (what runs where), kept the same way
    "AFTER INSERT ON main.allocations BEGIN SELECT dettui_allocation(NEW.id); END",
    "AFTER UPDATE ON main.allocations "
    "BEGIN SELECT dettui_allocation(OLD.id), dettui_allocation(NEW.id); END",
    "AFTER DELETE ON main.allocations BEGIN SELECT dettui_allocation(OLD.id); END",
)
LIVE_RESYNC = 300.0  # seconds between whole reads of the live allocations (a safety net)


class Watch:
    """The experiments marked since the last `take`, and the live allocations kept with the
    ids of those changed since (touched on the store thread only)."""

    def __init__(self) -> None:
        self.changed: set[int] = set()
        self.allocations: set[str] = set()  # changed since `live` was brought up to date
        self.live: dict[str, Allocation] | None = None  # None: read them all next time
        self.live_at = 0.0  # when they were last read whole (monotonic)
        self.experiment_of: dict[int, int] = {}  # the trials of `live` -> their experiments

    def mark(self, exp_id: int | None) -> None:
        if exp_id is not None:
            self.changed.add(exp_id)

    def mark_allocation(self, alloc_id: str | None) -> None:
        if alloc_id is not None:
            self.allocations.add(alloc_id)

    def take(self) -> set[int]:
        taken, self.changed = self.changed, set()
        return taken


def watch(conn: sqlite3.Connection) -> Watch | None:
    """Mark, from now on, every experiment whose place in the queue a statement on `conn`
    changes; None on PostgreSQL (every read is then whole)."""
    if getattr(conn, "dialect", "sqlite") != "sqlite":
        return None
    seen = Watch()
    conn.create_function("dettui_waiting", 1, seen.mark)
    conn.create_function("dettui_allocation", 1, seen.mark_allocation)
    for n, body in enumerate(_TRIGGERS):
        conn.execute(f"DROP TRIGGER IF EXISTS temp.dettui_waiting_{n}")
        conn.execute(f"CREATE TEMP TRIGGER dettui_waiting_{n} {body}")
    return seen


@dataclass
class Read:
    """A read of the queue: whole (`whole`), or of the experiments in `ids` only (those absent
    from `jobs` are no longer live)."""

    whole: bool
    ids: set[int]
    jobs: dict[int, Job]  # the live experiments read
    heads: dict[int, list[int]]  # active ones with queued trials: their first `limit` trial ids
    counts: dict[int, int]  # and how many they have queued in all
    limit: int


def read(conn: sqlite3.Connection, seen: Watch | None, also: Collection[int], limit: int,
         whole: bool = False) -> Read:
    """The queue as it is now: whole if asked, if nothing watches, or if more experiments
    changed than a read of them one by one is worth; else the changed ones and `also` (those
    whose first `limit` trials the caller has not read)."""
    changed = seen.take() if seen is not None else set()
    ids = changed | set(also)
    if whole or seen is None or len(ids) > FULL:
        return _whole(conn, limit)
    jobs = _jobs(conn, ids)
    heads: dict[int, list[int]] = {}
    counts: dict[int, int] = {}
    queued = TrialState.QUEUED.value
    for exp_id, job in jobs.items():
        if job.state is not ExperimentState.ACTIVE:
            continue
        first = [r[0] for r in conn.execute(
            "SELECT id FROM trials WHERE state=? AND experiment_id=? ORDER BY id LIMIT ?",
            (queued, exp_id, limit))]
        if not first:
            continue
        heads[exp_id] = first
        counts[exp_id] = len(first) if len(first) < limit else conn.execute(
            "SELECT COUNT(*) FROM trials WHERE state=? AND experiment_id=?",
            (queued, exp_id)).fetchone()[0]
    return Read(False, ids, jobs, heads, counts, limit)


def running(conn: sqlite3.Connection, seen: Watch | None = None,
            ) -> tuple[list[Allocation], dict[int, int]]:
    """The live allocations (oldest first), and the experiment of each one's trial. With
    `seen`, those kept from the last call, brought up to date by reading again only the ones
    a statement changed since (800 live allocations read whole were a pass's largest read);
    a whole read the first time, after a failure, and every LIVE_RESYNC seconds."""
    if seen is None:
        live = trials.live_allocations(conn)
        return live, trials.experiment_ids(conn, [a.trial_id for a in live])
    try:
        now = time.monotonic()
        if seen.live is None or now - seen.live_at >= LIVE_RESYNC:
            seen.allocations.clear()
            seen.live = {a.id: a for a in trials.live_allocations(conn)}
            seen.live_at, seen.experiment_of = now, {}
        elif seen.allocations:
            changed, seen.allocations = sorted(seen.allocations), set()
            for alloc_id in changed:
                seen.live.pop(alloc_id, None)
            seen.live.update((a.id, a) for a in trials.live_allocations_in(conn, changed))
        live = sorted(seen.live.values(), key=_STARTED)
        wanted = {a.trial_id for a in live}
        seen.experiment_of = {t: e for t, e in seen.experiment_of.items() if t in wanted}
        seen.experiment_of.update(trials.experiment_ids(
            conn, sorted(wanted - seen.experiment_of.keys())))
        return live, dict(seen.experiment_of)
    except BaseException:
        seen.live = None  # read them all next time
        raise


def _jobs(conn: sqlite3.Connection, ids: Collection[int]) -> dict[int, Job]:
    where, args = live_where()
    wanted = sorted(ids)
    out: dict[int, Job] = {}
    for chunk, marks in in_chunks(wanted):
        out.update((r[0], Job.from_row(r)) for r in conn.execute(
            f"SELECT {columns(JOB_COLUMNS, 'e')} FROM experiments e "
            f"WHERE e.id IN ({marks}) AND {where}", [*chunk, *args]))
    return out


def _whole(conn: sqlite3.Connection, limit: int) -> Read:
    jobs = live_jobs(conn)
    rows = conn.execute(
        "SELECT id, experiment_id, n FROM ("
        " SELECT id, experiment_id,"
        "  ROW_NUMBER() OVER (PARTITION BY experiment_id ORDER BY id) AS rn,"
        "  COUNT(*) OVER (PARTITION BY experiment_id) AS n"
        " FROM trials WHERE state=? AND experiment_id IN"
        "  (SELECT id FROM experiments WHERE state=? AND unmanaged=0)) q "
        "WHERE rn <= ?",
        (TrialState.QUEUED.value, ExperimentState.ACTIVE.value, limit))
    heads: dict[int, list[int]] = {}
    counts: dict[int, int] = {}
    for trial_id, exp_id, n in rows:
        heads.setdefault(exp_id, []).append(trial_id)
        counts[exp_id] = n
    for first in heads.values():
        first.sort()
    return Read(True, set(jobs), jobs, heads, counts, limit)
