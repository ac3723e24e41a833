"""The job queue as Determined's job-queues-v2 shows it: live experiments as jobs, in queue
order, with their slots, state and why they wait. Read by the job queue route and the push
stream's `jobs` topics.

Each job is Determined's v1Job, with one more field: `waitReason`, why a job with trials
waiting has not started them, in words a user acts on ("behind job 3f2a9c01 (priority 10) of
higher priority", "pool default full: 4 of 4 slots in use", "max_slots 2 of the experiment
reached", "paused", ...), as the last scheduling pass found it (scheduler.Waiting), or null.
`unschedulableReason` stays Determined's: set only when a trial can never fit its pool."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dettui.master.http import appkeys
from dettui.master.http.wire import json_bytes, ts
from dettui.master.scheduler import FAIR_SHARE, Tail, Wait
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.page import Page, Window
from dettui.master.store.records import JobView
from dettui.models import ExperimentState, JobState


@dataclass(frozen=True)
class Requests:
    """What the job queue needs of a page's trials: the running ones, how many wait, and why
    trials wait (read as counts: a page of 500 jobs can have 5,000 queued trials)."""

    running: dict[int, list[int]]  # experiment -> its RUNNING trials' ids
    queued: dict[int, int]  # experiment -> how many of its trials are QUEUED
    reasons: dict[int, str]  # trial -> why it waits (the last scheduling pass, Slurm)
    first: dict[int, int]  # experiment -> its lowest trial id with a reason

    def of(self, exp_id: int) -> tuple[list[int], int, str | None]:
        """An experiment's running trials, how many wait, and why the first of them waits. A
        running trial with a reason (its Slurm job is pending) waits, it does not run."""
        running = self.running.get(exp_id, [])
        first = self.first.get(exp_id)
        if not running and first is None:  # most of a long queue: it waits, for no reason
            return running, self.queued.get(exp_id, 0), None
        held = [t for t in running if t in self.reasons]
        reason = self.reasons[first] if first is not None else None
        return ([t for t in running if t not in self.reasons],
                self.queued.get(exp_id, 0) + len(held), reason)


@dataclass(frozen=True)
class Waits:
    """Why jobs wait, as the last scheduling pass found (Scheduling.job_waits)."""

    by_experiment: Mapping[int, Wait]
    tails: Mapping[str, Tail]

    def reason(self, e: JobView, waiting: int, unschedulable: str | None) -> str | None:
        """A job's `waitReason`: paused; else, with trials waiting, why they can never fit
        (or Slurm holds them), why the pass did not start its first, or why the pass stopped
        before it."""
        if e.state is ExperimentState.PAUSED:
            return "paused"
        if not waiting:
            return None
        if unschedulable:
            return unschedulable
        wait = self.by_experiment.get(e.id)
        if wait is None and (tail := self.tails.get(e.resource_pool)) is not None:
            wait = tail.wait(e.job_id, e.priority, e.resource_pool)
        return wait.text if wait is not None else None


NO_WAITS = Waits({}, {})


def job_rows(
    exps: list[JobView], requests: Requests, ahead_of: dict[int, int],
    fair_pools: set[str] = frozenset(),  # type: ignore[assignment]
    backfilled: set[int] = frozenset(),  # type: ignore[assignment]
    only_requests: bool = False, waits: Waits = NO_WAITS,
) -> list[dict[str, Any]]:
    """Live experiments as jobs, in the order given, with their slots and state.

    `ahead_of` gives each experiment's place in the whole queue (`exps` are a page of it). A
    running job is SCHEDULED_BACKFILLED when one of its trials was started by backfilling
    (`backfilled` trial ids), as in Determined; a job that started first stays SCHEDULED when
    a more urgent one queues behind it. With `only_requests`, as Determined's job queue, only
    jobs with a pending or running request (a trial queued or running) are listed: a paused
    experiment with nothing running is not.
    """
    rows = []
    for e in exps:
        running, waiting, reason = requests.of(e.id)
        if only_requests and not running and not waiting:
            continue
        state = JobState.QUEUED.value
        if running:
            state = (JobState.SCHEDULED_BACKFILLED if any(t in backfilled for t in running)
                     else JobState.SCHEDULED).value
        rows.append({
            "summary": {"state": state,
                        "jobsAhead": -1 if e.resource_pool in fair_pools else ahead_of[e.id]},
            "type": "TYPE_EXPERIMENT", "submissionTime": ts(e.start_time),
            "username": e.username, "userId": e.owner_id, "resourcePool": e.resource_pool,
            "isPreemptible": True, "priority": e.priority, "weight": e.weight,
            "entityId": str(e.id), "jobId": e.job_id,
            "requestedSlots": e.slots_per_trial * max(1, len(running) + waiting),
            "allocatedSlots": e.slots_per_trial * len(running), "name": e.name,
            "progress": e.progress or 0, "workspaceId": 1,
            "unschedulableReason": reason,
            "waitReason": waits.reason(e, waiting, reason),
            "experimentState": e.state.value,
        })
    return rows


async def queue_jobs(app: web.Application, pool: str | None = None,
                     only_requests: bool = False) -> list[dict[str, Any]]:
    """The job objects of the queue (of one pool, else of all), in queue order."""
    return (await queue_page(app, Page(), pool, only_requests))[0]


async def queue_page(app: web.Application, want: Page, pool: str | None = None,
                     only_requests: bool = False, states: list[str] | None = None,
                     ) -> tuple[list[dict[str, Any]], Window]:
    """A page of the queue: ordered from the live experiments' ordering keys and the trials
    that run or wait (no config read), then only the page's jobs read in full. Read in one
    snapshot on a reader connection, and made into job objects there too (10,000 of them
    take ~100 ms of Python: not on the event loop)."""
    return await app[appkeys.DB].read(_queue_rows, *queue_args(app, want, pool, only_requests,
                                                                states))


def queue_args(app: web.Application, want: Page, pool: str | None, only_requests: bool,
               states: list[str] | None) -> tuple[Any, ...]:
    """What a queue read needs of the cluster's state, to pass to the reader thread."""
    scheduling = app[appkeys.CLUSTER].scheduling
    fair = {p for p, pol in app[appkeys.SETTINGS].policies.items() if pol.scheduler == FAIR_SHARE}
    return (want, pool, only_requests, states, scheduling.backfilled_trials(),
            scheduling.waiting_reasons(), fair, scheduling.trial_experiments(),
            Waits(*scheduling.job_waits()))


def queue_body(conn: sqlite3.Connection, *args: Any) -> bytes:
    """GET /api/v1/job-queues-v2's JSON, encoded where it was read."""
    rows, window = _queue_rows(conn, *args)
    return json_bytes({"jobs": [{"full": r} for r in rows],
                       "pagination": window.pagination()})


def _queue_rows(conn: sqlite3.Connection, want: Page, pool: str | None, only_requests: bool,
                states: list[str] | None, backfilled: set[int], reasons: dict[int, str],
                fair: set[str], owners: Mapping[int, int], waits: Waits = NO_WAITS,
                ) -> tuple[list[dict[str, Any]], Window]:
    if not states:  # a walk of the queue's index (Determined's queue: the jobs with requests)
        exps, window = exp_store.queue_views(conn, want, pool, only_requests)
        ids = [e.id for e in exps]
        places = range(window.start, window.end)
        if want.desc:
            places = range(window.total - 1 - window.start, window.total - 1 - window.end, -1)
        ahead = dict(zip(ids, places, strict=True))
        running = trial_store.running_of(conn, ids)
    else:
        ids, window, ahead, running = _filtered(conn, want, pool, only_requests, states,
                                                backfilled)
        exps = exp_store.job_views(conn, ids)
        place = {eid: i for i, eid in enumerate(ids)}
        exps.sort(key=lambda e: place[e.id])
    on_page = set(ids)
    runs: dict[int, list[int]] = {}
    for trial_id, eid in running:
        if eid in on_page:
            runs.setdefault(eid, []).append(trial_id)
    # Each waiting trial's experiment: known to the scheduler for the trials it read (with no
    # agent joined, every job's first trial has a reason: 10,000 of them, each looked up in
    # the store per page before), read from the store for the rest (Slurm's held ones).
    owner = {t: e for t in reasons if (e := owners.get(t)) is not None}
    if len(owner) < len(reasons):
        owner.update(trial_store.experiment_ids(conn, [t for t in reasons if t not in owner]))
    first: dict[int, int] = {}  # per experiment once, not a scan of `owner` per job
    for t, e in owner.items():
        if e in on_page and t < first.get(e, t + 1):
            first[e] = t
    requests = Requests(runs, trial_store.queued_counts(conn, ids), reasons, first)
    return job_rows(exps, requests, ahead, fair, backfilled, only_requests, waits), window


def _filtered(conn: sqlite3.Connection, want: Page, pool: str | None, only_requests: bool,
              states: list[str], backfilled: set[int],
              ) -> tuple[list[int], Window, dict[int, int], list[tuple[int, int]]]:
    """A page of the jobs with a request (`only_requests`) or in `states`: the page's ids,
    its window, each job's place in the whole queue, and the running trials."""
    live = exp_store.live_keys(conn, pool)
    running, queued = trial_store.active(conn)
    state: dict[int, str] = {eid: JobState.QUEUED.value for eid in queued}
    for trial_id, eid in running:
        if state.get(eid) != JobState.SCHEDULED_BACKFILLED.value:
            state[eid] = (JobState.SCHEDULED_BACKFILLED if trial_id in backfilled
                          else JobState.SCHEDULED).value
    ordered = [k[0] for k in sorted(live, key=lambda k: (k[1], k[2], k[0]))]
    ahead = {eid: i for i, eid in enumerate(ordered)}
    listed = [eid for eid in ordered if (not only_requests or eid in state)
              and (not states or state.get(eid, JobState.QUEUED.value) in states)]
    if want.desc:
        listed.reverse()
    window = want.window(len(listed))
    return window.of(listed), window, ahead, running

