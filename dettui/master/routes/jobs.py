"""Resource pools and the job queue (Determined's job-queues-v2 shape)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dettui.config.schema import priority_value, weight_value
from dettui.errors import FailedPrecondition, InvalidArgument, NotFound
from dettui.master import keys
from dettui.master.bodies import UpdateJobQueueBody, checked
from dettui.master.cluster import Cluster
from dettui.master.middleware import read_json, require_owner
from dettui.master.openapi import op
from dettui.master.queue import QueuedJob, move
from dettui.master.scheduler import FAIR_SHARE, PoolPolicy
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.page import Page, Window
from dettui.master.store.records import Experiment, JobView
from dettui.master.wire import json_bytes, json_response, page_of, paginate, ts
from dettui.models import JobState

routes = web.RouteTableDef()


def pool_json(name: str, cluster: Cluster, default: bool, used: int,
              policy: PoolPolicy) -> dict[str, Any]:
    links = [lk for lk in cluster.agents.connected() if lk.agent.pool == name]
    slots = sum(len(lk.agent.slots) for lk in links)
    slot_type = "TYPE_CUDA" if any(
        s.get("type") == "cuda" for lk in links for s in lk.agent.slots) else "TYPE_CPU"
    fair = policy.scheduler == FAIR_SHARE
    return {
        "name": name, "description": "", "type": "RESOURCE_POOL_TYPE_STATIC",
        "numAgents": len(links), "slotsAvailable": slots, "slotsUsed": used,
        "slotType": slot_type, "auxContainerCapacity": 0, "auxContainersRunning": 0,
        "defaultComputePool": default, "defaultAuxPool": default,
        "preemptible": fair or policy.preemption,
        "minAgents": 0, "maxAgents": 0, "slotsPerAgent": 0, "auxContainerCapacityPerAgent": 0,
        "schedulerType": "SCHEDULER_TYPE_FAIR_SHARE" if fair else "SCHEDULER_TYPE_PRIORITY",
        "schedulerFittingPolicy": "FITTING_POLICY_BEST",
        "location": "local", "imageId": "", "instanceType": "", "masterUrl": "",
        "masterCertName": "", "startupScript": "", "containerStartupScript": "",
        "agentDockerNetwork": "", "agentDockerRuntime": "", "agentDockerImage": "",
        "agentFluentImage": "", "maxIdleAgentPeriod": 0, "maxAgentStartingPeriod": 0,
        "details": {}, "accelerator": "", "clusterName": "", "resourceManagerMetadata": {},
    }


@routes.get("/api/v1/resource-pools")
@op(paged=True)
async def resource_pools(request: web.Request) -> web.Response:
    settings = request.app[keys.SETTINGS]
    cluster = request.app[keys.CLUSTER]
    names = list(dict.fromkeys([*settings.pools,
                                *(lk.agent.pool for lk in cluster.agents.connected())]))
    used: dict[str, int] = {}  # the slots live allocations hold (four columns each)
    for agent_id, slots in (await request.app[keys.DB].read(trial_store.slots_in_use)).items():
        pool = cluster.agents.pool_of(agent_id)
        if pool is not None:
            used[pool] = used.get(pool, 0) + len(slots)
    pools = [pool_json(n, cluster, n == settings.default_pool, used.get(n, 0), settings.policy(n))
             for n in names]
    page, pagination = paginate(pools, request)
    return json_response({"resourcePools": page, "pagination": pagination})


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


def job_rows(
    exps: list[JobView], requests: Requests, ahead_of: dict[int, int],
    fair_pools: set[str] = frozenset(),  # type: ignore[assignment]
    backfilled: set[int] = frozenset(),  # type: ignore[assignment]
    only_requests: bool = False,
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
    return await app[keys.DB].read(_queue_rows, *_queue_args(app, want, pool, only_requests,
                                                             states))


def _queue_args(app: web.Application, want: Page, pool: str | None, only_requests: bool,
                states: list[str] | None) -> tuple[Any, ...]:
    scheduling = app[keys.CLUSTER].scheduling
    fair = {p for p, pol in app[keys.SETTINGS].policies.items() if pol.scheduler == FAIR_SHARE}
    return (want, pool, only_requests, states, scheduling.backfilled_trials(),
            scheduling.waiting_reasons(), fair, scheduling.trial_experiments())


def _queue_body(conn: sqlite3.Connection, *args: Any) -> bytes:
    """GET /api/v1/job-queues-v2's JSON, encoded where it was read."""
    rows, window = _queue_rows(conn, *args)
    return json_bytes({"jobs": [{"full": r} for r in rows],
                       "pagination": window.pagination()})


def _queue_rows(conn: sqlite3.Connection, want: Page, pool: str | None, only_requests: bool,
                states: list[str] | None, backfilled: set[int], reasons: dict[int, str],
                fair: set[str], owners: Mapping[int, int],
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
    return job_rows(exps, requests, ahead, fair, backfilled, only_requests), window


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


@routes.get("/api/v1/job-queues-v2")
@op(query={"resourcePool": str, "states": list[str], "includeIdle": bool}, paged=True)
async def job_queue(request: web.Request) -> web.Response:
    """Determined's job queue: jobs with a pending or running request. dettui's own clients
    add `includeIdle=true` to see every live job (a paused one too, to activate it)."""
    idle = request.query.get("includeIdle", "false").lower() == "true"
    body = await request.app[keys.DB].read(_queue_body, *_queue_args(
        request.app, page_of(request), request.query.get("resourcePool") or None,
        not idle, request.query.getall("states", []) or None))
    return web.Response(body=body, content_type="application/json")


@routes.post("/api/v1/job-queues")
@op(body=UpdateJobQueueBody)
async def update_jobs(request: web.Request) -> web.Response:
    """Determined's UpdateJobQueue, plus aheadOf/behindOf (removed from det in 0.35)."""
    raw = await read_json(request)
    updates = raw.get("updates") if isinstance(raw, dict) else None
    if not isinstance(updates, list):
        raise InvalidArgument("updates: must be a list")
    db = request.app[keys.DB]
    errors = []
    for i, upd in enumerate(updates):
        if not isinstance(upd, dict) or not isinstance(upd.get("jobId"), str):
            raise InvalidArgument(f"updates[{i}].jobId: must be a string")
        try:
            exp = await db.read(exp_store.by_job_id, upd["jobId"])
            require_owner(request, exp.owner_id, f"job {upd['jobId']}")
            fields = await _job_update(request, exp, upd, i)
            await db.run(exp_store.update_fields, exp.id, **fields)
        except NotFound as exc:
            errors.append(str(exc))
    if errors:
        msg = errors[0] if len(errors) == 1 else "encountered the following errors: " + ", ".join(
            errors)
        raise NotFound(msg)
    request.app[keys.NOTIFIER].notify("jobs", "experiments")
    request.app[keys.CLUSTER].kick()
    return json_response({})


async def _job_update(request: web.Request, exp: Experiment, upd: dict[str, Any],
                      i: int) -> dict[str, Any]:
    settings = request.app[keys.SETTINGS]
    policy = settings.policy(exp.resource_pool)
    fair = policy.scheduler == FAIR_SHARE
    if upd.get("priority") is not None:
        p = checked(priority_value, upd["priority"], f"updates[{i}].priority")
        if fair:
            raise FailedPrecondition(f"pool '{exp.resource_pool}' uses the fair share scheduler: "
                                     "set a weight instead of a priority")
        return {"priority": p}
    if upd.get("weight") is not None:
        w = checked(weight_value, upd["weight"], f"updates[{i}].weight")
        if not fair:
            raise FailedPrecondition(f"pool '{exp.resource_pool}' uses the priority scheduler: "
                                     "set a priority instead of a weight")
        return {"weight": w}
    if upd.get("resourcePool") is not None:
        pool = str(upd["resourcePool"])
        if pool not in settings.policies:
            raise InvalidArgument(f"updates[{i}].resourcePool: resource pool '{pool}' not found "
                                  f"(known pools: {', '.join(settings.policies)})")
        return {"resource_pool": pool}
    for key, ahead in (("aheadOf", True), ("behindOf", False)):
        anchor = upd.get(key)
        if anchor is not None:
            if fair:
                raise FailedPrecondition("ahead-of and behind-of need the priority scheduler; "
                                         f"pool '{exp.resource_pool}' uses fair share")
            return await _moved(request, exp, str(anchor), ahead)
    raise InvalidArgument("unexpected action: <nil>")


async def _moved(request: web.Request, exp: Experiment, anchor_id: str,
                 ahead: bool) -> dict[str, Any]:
    exps = list((await request.app[keys.DB].read(exp_store.live_jobs)).values())
    anchor = next((e for e in exps if e.job_id == anchor_id), None)
    if anchor is None:
        raise NotFound(f"job {anchor_id} not found")
    if anchor.resource_pool != exp.resource_pool:
        raise FailedPrecondition(f"job {anchor_id} is in pool '{anchor.resource_pool}', not "
                                 f"'{exp.resource_pool}'")
    jobs = [QueuedJob(e.job_id, e.priority, e.queue_position) for e in exps
            if e.resource_pool == exp.resource_pool]
    priority, position = move(jobs, exp.job_id, anchor_id, ahead)
    return {"priority": priority, "queue_position": position}
