"""Resource pools and the job queue (Determined's job-queues-v2 shape)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dettui.config.schema import priority_value, weight_value
from dettui.errors import FailedPrecondition, InvalidArgument, NotFound
from dettui.master.cluster import Cluster
from dettui.master.http import appkeys
from dettui.master.http.body import read_json
from dettui.master.http.middleware import require_owner
from dettui.master.http.openapi import op
from dettui.master.http.requests import UpdateJobQueueBody, checked
from dettui.master.http.wire import json_response, page_of, paginate
from dettui.master.queue_moves import QueuedJob, move
from dettui.master.scheduler import FAIR_SHARE, PoolPolicy
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Experiment
from dettui.master.views import jobs as job_views

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
    settings = request.app[appkeys.SETTINGS]
    cluster = request.app[appkeys.CLUSTER]
    names = list(dict.fromkeys([*settings.pools,
                                *(lk.agent.pool for lk in cluster.agents.connected())]))
    used: dict[str, int] = {}  # the slots live allocations hold (four columns each)
    for agent_id, slots in (await request.app[appkeys.DB].read(trial_store.slots_in_use)).items():
        pool = cluster.agents.pool_of(agent_id)
        if pool is not None:
            used[pool] = used.get(pool, 0) + len(slots)
    pools = [pool_json(n, cluster, n == settings.default_pool, used.get(n, 0), settings.policy(n))
             for n in names]
    page, pagination = paginate(pools, request)
    return json_response({"resourcePools": page, "pagination": pagination})


@routes.get("/api/v1/job-queues-v2")
@op(query={"resourcePool": str, "states": list[str], "includeIdle": bool}, paged=True)
async def job_queue(request: web.Request) -> web.Response:
    """Determined's job queue: jobs with a pending or running request. dettui's own clients
    add `includeIdle=true` to see every live job (a paused one too, to activate it). Each job
    is Determined's v1Job plus `waitReason`: why its waiting trials have not started, as the
    last scheduling pass found ("behind job 3f2a9c01 (priority 10) of higher priority",
    "pool default full: 4 of 4 slots in use", "paused", ...), or null (views/jobs.py)."""
    idle = request.query.get("includeIdle", "false").lower() == "true"
    body = await request.app[appkeys.DB].read(job_views.queue_body, *job_views.queue_args(
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
    db = request.app[appkeys.DB]
    errors = []
    for i, upd in enumerate(updates):
        if not isinstance(upd, dict) or not isinstance(upd.get("jobId"), str):
            raise InvalidArgument(f"updates[{i}].jobId: must be a string")
        try:
            exp = await db.read(exp_store.by_job_id, upd["jobId"])
            if exp.state.is_terminal():  # as Determined: an ended experiment's job is gone
                raise NotFound(f"job {upd['jobId']} not found")
            require_owner(request, exp.owner_id, f"job {upd['jobId']}")
            fields = await _job_update(request, exp, upd, i)
            await request.app[appkeys.CLUSTER].dispatcher.run(exp_store.update_fields, exp.id,
                                                              **fields)
        except NotFound as exc:
            errors.append(str(exc))
    if errors:
        msg = errors[0] if len(errors) == 1 else "encountered the following errors: " + ", ".join(
            errors)
        raise NotFound(msg)
    return json_response({})


async def _job_update(request: web.Request, exp: Experiment, upd: dict[str, Any],
                      i: int) -> dict[str, Any]:
    settings = request.app[appkeys.SETTINGS]
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
    exps = list((await request.app[appkeys.DB].read(exp_store.live_jobs)).values())
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
