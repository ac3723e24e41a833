"""Agents: the cluster view, our agent protocol, and allocation signals (preemption)."""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any

from aiohttp import web

from dettui.errors import InvalidArgument, NotFound, PermissionDenied
from dettui.master import offload
from dettui.master.http import appkeys
from dettui.master.http.body import read_json
from dettui.master.http.middleware import (
    agent_route,
    agent_too,
    check_allocation,
    not_for_trials,
    principal,
    require_admin,
    require_agent,
    require_trial_writer,
    task_route,
)
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    AgentCredentialBody,
    DisableAgentBody,
    MarkDaemonBody,
    parse,
    parse_obj,
)
from dettui.master.http.wire import big_json_response, json_response, path_int, query_float, ts
from dettui.master.store import credentials, exits
from dettui.master.store import experiments as exp_store
from dettui.master.store import logs as log_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation, Experiment, Trial
from dettui.master.telemetry import Malformed
from dettui.master.views import agents as agent_views
from dettui.protocol import (
    AgentLogsBody,
    AllocationExitBody,
    HeartbeatBody,
    RegisterAgentBody,
    Registered,
    TelemetrySample,
    WorkBody,
)

routes = web.RouteTableDef()
MAX_POLL = 60.0
LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# An agent's id reaches logs, tables and the dashboard: printable and plain, as host names are
AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,254}")


@routes.get("/api/v1/agents")
async def list_agents(request: web.Request) -> web.Response:
    agents = await agent_views.agent_objects(request.app)
    return await big_json_response({"agents": agents, "pagination": {
        "offset": 0, "limit": 0, "startIndex": 0, "endIndex": len(agents),
        "total": len(agents)}})


@routes.post("/api/v1/agents/register")
@op(body=RegisterAgentBody)
@agent_route
async def register(request: web.Request) -> web.Response:
    body = await parse(request, RegisterAgentBody)
    if not AGENT_ID.fullmatch(body.id):
        raise InvalidArgument("id: an agent id must be 1 to 255 letters, digits and . _ - : @ +, "
                              "starting with a letter or digit (a host name is one)")
    cred = require_agent(request, body.id, registering=True)
    settings = request.app[appkeys.SETTINGS]
    agent = await request.app[appkeys.CLUSTER].agents.register(
        body.id, body.resource_pool or settings.default_pool,
        [s.model_dump() for s in body.slots], body.hostname, body.addresses,
        body.running_allocations, body.no_gpu_reason, cred_id=cred.id, sandbox=body.sandbox,
    )
    return json_response(Registered(
        agent_id=agent.id, cluster_id=request.app[appkeys.CLUSTER_ID],
        heartbeat_seconds=settings.heartbeat_interval,
        agent_timeout_seconds=settings.agent_timeout).wire())


def own_agent(request: web.Request) -> str:
    """The path's agent id, which the caller's credential must have registered as: a
    credential speaks only for its own agent, and one not yet bound speaks for none (it
    registers first, and is refused there if another credential holds the id)."""
    agent_id = request.match_info["agentId"]
    if require_agent(request, agent_id).agent_id != agent_id:
        raise PermissionDenied(f"this agent credential has not registered as agent {agent_id}")
    return agent_id


MAX_HEARTBEAT_BODY = 4 * 1024 * 1024  # an agent's 30 samples of 1,024 allocations are 2 MiB;
# decoding a body costs about 0.25 s a MiB of tiny samples, under the master's one GIL


@routes.post("/api/v1/agents/{agentId}/heartbeat")
@op(body=HeartbeatBody, max_body=MAX_HEARTBEAT_BODY)
@agent_route
async def heartbeat(request: web.Request) -> web.Response:
    """The agent is alive. Allocations it lists that are not its own are never touched: it is
    told to kill its copies (`Agents._reconcile`)."""
    agent_id = own_agent(request)
    body = await parse(request, HeartbeatBody)
    raw = body.samples or ([body.telemetry] if body.telemetry else [])
    samples = await offload.cpu(_samples, raw)  # (up to 120 samples of 1,024 allocations)
    await request.app[appkeys.CLUSTER].agents.heartbeat(agent_id, body.running_allocations,
                                                        None, samples)
    return json_response({})


def _samples(raw: list[Any]) -> list[TelemetrySample | Malformed]:
    return [telemetry_sample(sample) for sample in raw]


def telemetry_sample(raw: object) -> TelemetrySample | Malformed:
    """One telemetry sample of a heartbeat, parsed; a malformed one says why (it is dropped:
    a heartbeat never fails for its telemetry)."""
    try:
        return parse_obj(raw, TelemetrySample)
    except InvalidArgument as exc:
        return Malformed(exc.message)


async def _enable(request: web.Request, enabled: bool) -> web.Response:
    require_admin(request)
    body = await read_json(request)
    drain = bool(body.get("drain")) if isinstance(body, dict) else False
    agents = request.app[appkeys.CLUSTER].agents
    agent = await agents.set_enabled(request.match_info["agentId"], enabled, drain)
    return json_response({"agent": {"id": agent.id, "enabled": agent.enabled,
                                    "draining": agent.draining}})


@routes.post("/api/v1/agents/{agentId}/enable")
async def enable(request: web.Request) -> web.Response:
    return await _enable(request, True)


@routes.post("/api/v1/agents/{agentId}/disable")
@op(body=DisableAgentBody)
async def disable(request: web.Request) -> web.Response:
    """`det agent disable [--drain]`: without --drain its running trials are killed and
    rescheduled elsewhere, as in Determined; with it they finish."""
    return await _enable(request, False)


async def _slot(request: web.Request, enabled: bool) -> web.Response:
    require_admin(request)
    slot_id = path_int(request, "slotId")
    agents = request.app[appkeys.CLUSTER].agents
    agent = await agents.set_slot_enabled(request.match_info["agentId"], slot_id, enabled)
    return json_response({"slot": {"id": str(slot_id), "enabled": agent.slot_enabled(
        slot_id), "draining": agent.draining}})


@routes.post("/api/v1/agents/{agentId}/slots/{slotId}/enable")
async def enable_slot(request: web.Request) -> web.Response:
    return await _slot(request, True)


@routes.post("/api/v1/agents/{agentId}/slots/{slotId}/disable")
async def disable_slot(request: web.Request) -> web.Response:
    """`det slot disable`: no new work on the slot (what runs there goes on)."""
    return await _slot(request, False)


def _live_tasks(conn: sqlite3.Connection) -> list[tuple[Allocation, Trial, Experiment]]:
    """Each live allocation with its trial and experiment (one snapshot, one read each)."""
    out = []
    exps: dict[int, Experiment] = {}
    for alloc in trial_store.live_allocations(conn):
        trial = trial_store.get(conn, alloc.trial_id)
        if trial.experiment_id not in exps:
            exps[trial.experiment_id] = exp_store.get(conn, trial.experiment_id)
        out.append((alloc, trial, exps[trial.experiment_id]))
    return out


@routes.get("/api/v1/tasks")
async def tasks(request: web.Request) -> web.Response:
    """Running allocations with their slots and agents (Determined's allocationIdToSummary)."""
    out = {}
    for alloc, trial, exp in await request.app[appkeys.DB].read(_live_tasks):
        out[alloc.id] = {
            "taskId": trial.task_id, "allocationId": alloc.id, "name": f"Trial {trial.id}",
            "registeredTime": ts(alloc.start_time), "resourcePool": exp.resource_pool,
            "slotsNeeded": alloc.total_slots, "state": alloc.state.value, "type": "TRIAL",
            "trialId": trial.id, "experimentId": trial.experiment_id,
            "priority": exp.priority, "schedulerType": "priority", "proxyPorts": [],
            "resources": [_resources(alloc, a, sl) for a, sl in alloc.parts],
            "preempting": alloc.preempt_requested,
        }
    return json_response({"allocationIdToSummary": out})


def _resources(alloc: Any, agent_id: str, slots: list[int]) -> dict[str, Any]:
    """Determined's v1ResourcesSummary: one agent's part of an allocation (`det task list`
    reads the agent from `agentDevices`, `det slot list` matches `containerId`)."""
    cid = alloc.container_id(agent_id)
    return {"resourcesId": cid, "containerId": cid, "allocationId": alloc.id,
            "resourcesType": "dettui-process", "agentId": agent_id, "slots": slots,
            "agentDevices": {agent_id: {"devices": [
                {"id": s, "brand": "", "uuid": "", "type": "TYPE_UNSPECIFIED"} for s in slots]}},
            "started": None, "exited": None}


@routes.post("/api/v1/agents/{agentId}/drain")
@agent_route
async def drain(request: web.Request) -> web.Response:
    request.app[appkeys.CLUSTER].agents.drain(own_agent(request))
    return json_response({})


@routes.post("/api/v1/agents/{agentId}/leave")
@agent_route
async def leave(request: web.Request) -> web.Response:
    await request.app[appkeys.CLUSTER].agents.leave(own_agent(request))
    return json_response({})


@routes.get("/api/v1/agents/{agentId}/work")
@op(query={"timeout_seconds": float}, long_poll="timeout_seconds")
@agent_route
async def work(request: web.Request) -> web.Response:
    agent_id = own_agent(request)
    timeout = min(max(query_float(request, "timeout_seconds", 30.0), 0.0), MAX_POLL)
    items = await request.app[appkeys.CLUSTER].agents.poll_work(agent_id, timeout)
    return json_response(WorkBody(work=items).wire())


@routes.post("/api/v1/agents/{agentId}/allocations/{allocationId}/exit")
@op(body=AllocationExitBody)
@agent_route
async def allocation_exit(request: web.Request) -> web.Response:
    """An agent's part of an allocation exited: only a part that runs on this agent."""
    agent_id = own_agent(request)
    body = await parse(request, AllocationExitBody)
    alloc_id = request.match_info["allocationId"]
    alloc = await request.app[appkeys.DB].read(trial_store.allocation, alloc_id)
    if agent_id not in alloc.agents:
        raise PermissionDenied(f"allocation {alloc_id} has no part on agent {agent_id}")
    await request.app[appkeys.CLUSTER].agents.part_exit(agent_id, alloc_id, body.exit_code,
                                                         body.reason)
    return json_response({})


@routes.post("/api/v1/agents/{agentId}/logs")
@op(body=AgentLogsBody)
@agent_too
@task_route
async def agent_logs(request: web.Request) -> web.Response:
    """Log lines of allocations' parts on an agent: shipped by the agent with its credential,
    or by the node parts of a Slurm job with their allocation's token (its own lines only)."""
    agent_id = request.match_info["agentId"]
    caller = principal(request)
    if caller.allocation is None:
        own_agent(request)
    body = await parse(request, AgentLogsBody)
    if caller.allocation is not None:
        for line in body.logs:
            check_allocation(request, line.allocation_id)
    db = request.app[appkeys.DB]
    trial_of: dict[str, tuple[int, str]] = {}
    containers: dict[str, str] = {}
    rows = []
    for line in body.logs:
        if line.allocation_id not in trial_of:
            alloc = await db.read(trial_store.allocation, line.allocation_id)
            if agent_id not in alloc.agents:
                raise PermissionDenied(f"allocation {alloc.id} has no part on agent {agent_id}")
            trial = await db.read(trial_store.get, alloc.trial_id)
            trial_of[line.allocation_id] = (trial.id, trial.task_id)
            containers[line.allocation_id] = alloc.container_id(agent_id)
        trial_id, task_id = trial_of[line.allocation_id]
        level = (line.level or "").removeprefix("LOG_LEVEL_") or None
        rows.append({"trial_id": trial_id, "task_id": task_id,
                     "allocation_id": line.allocation_id, "agent_id": agent_id,
                     "container_id": containers[line.allocation_id],
                     "rank_id": line.rank_id, "stdtype": line.stdtype, "source": "task",
                     "level": level if level in LEVELS else None, "timestamp": line.timestamp,
                     "log": line.log, "seq": line.seq})
    await request.app[appkeys.CLUSTER].dispatcher.run(log_store.insert, rows)
    return json_response({})


# --- agent credentials (admins issue them) ------------------------------------------------


def credential_json(c: credentials.AgentCredential) -> dict[str, Any]:
    return {"id": c.id, "description": c.description, "agentId": c.agent_id,
            "createdAt": ts(c.created_at), "revoked": c.revoked}


@routes.post("/api/v1/agent-credentials")
@op(body=AgentCredentialBody)
@not_for_trials("issue an agent credential")
async def issue_credential(request: web.Request) -> web.Response:
    """Issue a credential an agent joins the cluster with; its secret is shown only now."""
    admin = require_admin(request)
    body = await parse(request, AgentCredentialBody)
    issued = await request.app[appkeys.CLUSTER].dispatcher.run(credentials.issue, admin.id,
                                                                body.description)
    assert issued is not None
    cred, secret = issued
    return json_response({"credential": credential_json(cred), "token": secret})


@routes.get("/api/v1/agent-credentials")
async def list_credentials(request: web.Request) -> web.Response:
    require_admin(request)
    found = await request.app[appkeys.DB].read(credentials.list_)
    return json_response({"credentials": [credential_json(c) for c in found]})


@routes.delete("/api/v1/agent-credentials/{id}")
@not_for_trials("revoke an agent credential")
async def revoke_credential(request: web.Request) -> web.Response:
    """Revoke a credential: the agent using it is refused from its next request on."""
    require_admin(request)
    cred = await request.app[appkeys.CLUSTER].dispatcher.run(credentials.revoke,
                                                              path_int(request, "id"))
    assert cred is not None
    return json_response({"credential": credential_json(cred)})


# --- allocation signals (Determined's Core API preemption) -------------------------------


@task_route
@op(query={"timeout_seconds": float}, long_poll="timeout_seconds")
async def preemption(request: web.Request) -> web.Response:
    alloc_id = request.match_info["allocationId"]
    check_allocation(request, alloc_id)
    timeout = min(max(query_float(request, "timeout_seconds", 60.0), 0.0), 3600.0)
    flag = await request.app[appkeys.CLUSTER].preemption.wait(alloc_id, timeout)
    return json_response({"preempt": flag})


routes.get("/api/v1/allocations/{allocationId}/signals/preemption")(preemption)


@task_route
async def ack_preemption(request: web.Request) -> web.Response:
    alloc_id = request.match_info["allocationId"]
    await require_trial_writer(request, None, alloc_id)
    await request.app[appkeys.CLUSTER].dispatcher.run(trial_store.ack_preempt, alloc_id)
    return json_response({})


routes.post("/api/v1/allocations/{allocationId}/signals/ack_preemption")(ack_preemption)


@task_route
async def pending_preemption(request: web.Request) -> web.Response:
    """Determined's AllocationPendingPreemptionSignal, which `determined.exec.launch` sends on
    SIGTERM: only the allocation's own token."""
    alloc_id = request.match_info["allocationId"]
    await require_trial_writer(request, None, alloc_id)
    await request.app[appkeys.CLUSTER].dispatcher.run(trial_store.request_preempt, alloc_id)
    return json_response({})


routes.post("/api/v1/allocations/{allocationId}/signals/pending_preemption")(pending_preemption)


@task_route
@op(body=MarkDaemonBody)
async def mark_daemon(request: web.Request) -> web.Response:
    """Determined's MarkAllocationResourcesDaemon, which the real `determined.launch.deepspeed`
    and `horovod` call from every non-chief node before running its sshd: that node's part is
    ended once every other part has exited, and how it ends does not count. Only the
    allocation's own token (the launchers call it with DET_SESSION_TOKEN)."""
    alloc_id, resources_id = request.match_info["allocationId"], request.match_info["resourcesId"]
    await require_trial_writer(request, None, alloc_id)
    body = await parse(request, MarkDaemonBody)
    if body.allocation_id not in (None, "", alloc_id) or \
            body.resources_id not in (None, "", resources_id):
        raise InvalidArgument("allocationId and resourcesId must match the path")
    db = request.app[appkeys.DB]
    alloc = await db.read(trial_store.allocation, alloc_id)
    trial = await db.read(trial_store.get, alloc.trial_id)
    agent_id = alloc.agent_of(resources_id)
    if agent_id is None:
        raise NotFound(f"resources {resources_id} not found in allocation {alloc_id}")
    if not await request.app[appkeys.CLUSTER].dispatcher.run(exits.mark_daemon, alloc_id,
                                                             agent_id):
        await request.app[appkeys.CLUSTER].dispatcher.run(log_store.insert, [{
            "trial_id": trial.id, "task_id": trial.task_id, "allocation_id": alloc_id,
            "agent_id": agent_id, "container_id": resources_id, "source": "master",
            "level": "INFO", "timestamp": time.time(), "log": IGNORED_DAEMON}])
    return json_response({})


IGNORED_DAEMON = ("Ignoring request to daemonize resources within an allocation for an "
                  "allocation with only one manageable set of resources, because this would "
                  "just kill it.\n")
routes.post("/api/v1/allocations/{allocationId}/resources/{resourcesId}/daemon")(mark_daemon)


@routes.get("/api/v1/allocations/{allocationId}/slurm/start")
@task_route
async def slurm_start(request: web.Request) -> web.Response:
    """The start message of a Slurm allocation, for the node parts of its job (called with the
    allocation's own token)."""
    alloc_id = request.match_info["allocationId"]
    check_allocation(request, alloc_id)
    if principal(request).allocation is None:
        raise PermissionDenied("this needs the allocation's token")
    alloc = await request.app[appkeys.DB].read(trial_store.allocation, alloc_id)
    start = await request.app[appkeys.CLUSTER].slurm_start(alloc)
    return json_response(start.wire())
