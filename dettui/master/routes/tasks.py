"""One task by its id (`det task config|kill|pause|unpause`, `det notebook|tensorboard open`)
and `det task cleanup-logs`. dettui's only tasks are trials: a task is a trial's task, its
allocations the trial's runs; its config is its experiment's. The list of running tasks is
in `routes.agents` (with their agents and slots)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from aiohttp import web

from dettui.errors import FailedPrecondition, NotFound
from dettui.master.http import appkeys
from dettui.master.http.middleware import check_trial, require_admin, require_owner, task_route
from dettui.master.http.openapi import op
from dettui.master.http.wire import json_response, ts
from dettui.master.store import control
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation, Experiment, Trial
from dettui.models import AllocationState

routes = web.RouteTableDef()
# Determined's taskv1State of an allocation, by dettui's state of it
ALLOCATION_STATES = {AllocationState.ASSIGNED: "STATE_STARTING",
                     AllocationState.RUNNING: "STATE_RUNNING",
                     AllocationState.TERMINATING: "STATE_TERMINATING",
                     AllocationState.EXITED: "STATE_TERMINATED"}


def _task(conn: sqlite3.Connection, task_id: str) -> tuple[Trial, Experiment, list[Allocation]]:
    """The trial whose task this is (NotFound "task X not found"), its experiment and runs."""
    trial = trial_store.by_task_id(conn, task_id)
    return (trial, exp_store.get(conn, trial.experiment_id),
            trial_store.allocations_for_trial(conn, trial.id))


async def _lookup(request: web.Request) -> tuple[Trial, Experiment, list[Allocation]]:
    """A task that is no trial's is not found (404, as Determined answers an unknown id); the
    message says why it may be a notebook's, shell's, command's or TensorBoard's."""
    task_id = request.match_info["taskId"][:200]
    try:
        if "\x00" in task_id:  # no task's id (and PostgreSQL refuses to compare with it)
            raise NotFound(task_id)
        found = await request.app[appkeys.DB].read(_task, task_id)
    except NotFound:
        raise NotFound(f"task {task_id!r} not found: notebooks, shells, commands and "
                       "TensorBoards are not supported by dettui, its only tasks are trials' "
                       "(`det task list`)") from None
    check_trial(request, found[0].id)  # a task token: only its own task
    return found


def allocation_view(alloc: Allocation, task_id: str) -> dict[str, Any]:
    """Determined's v1Allocation."""
    out: dict[str, Any] = {
        "allocationId": alloc.id, "taskId": task_id, "slots": alloc.total_slots,
        "state": ALLOCATION_STATES[alloc.state], "startTime": ts(alloc.start_time),
        "isReady": alloc.state is AllocationState.RUNNING}
    if alloc.end_time is not None:
        out["endTime"] = ts(alloc.end_time)
    if alloc.exit_reason:
        out["exitReason"] = alloc.exit_reason
    if alloc.exit_code is not None:
        out["statusCode"] = alloc.exit_code
    return out


@task_route
async def get_task(request: web.Request) -> web.Response:
    """Determined's v1Task of a trial's task: TASK_TYPE_TRIAL, with each of its runs."""
    trial, _, allocs = await _lookup(request)
    task: dict[str, Any] = {
        "taskId": trial.task_id, "taskType": "TASK_TYPE_TRIAL",
        "startTime": ts(trial.start_time),
        "allocations": [allocation_view(a, trial.task_id) for a in allocs]}
    if trial.end_time is not None:
        task["endTime"] = ts(trial.end_time)
    return json_response({"task": task})


routes.get("/api/v1/tasks/{taskId}")(get_task)


@routes.get("/api/v1/tasks/{taskId}/config")
async def task_config(request: web.Request) -> web.Response:
    """The config the task runs with: its experiment's (JSON text, as Determined's)."""
    _, exp, _ = await _lookup(request)
    return json_response({"config": json.dumps(exp.config)})


@routes.post("/api/v1/tasks/{taskId}/kill")
@op(body=dict)
async def kill_task(request: web.Request) -> web.Response:
    """Kills the task's trial, as `det trial kill` (its owner or an admin); a task that has
    ended is refused as Determined refuses it."""
    trial, exp, _ = await _lookup(request)
    require_owner(request, exp.owner_id, f"task {trial.task_id}")
    if trial.state.is_terminal():
        raise FailedPrecondition(f"cannot cancel task {trial.task_id} as it is in state "
                                 f"'{trial.state.short}' (trial {trial.id} has ended)")
    if exp.unmanaged:
        raise FailedPrecondition(f"task {trial.task_id} is a detached trial's: end it from "
                                 "its script")
    await request.app[appkeys.CLUSTER].dispatcher.run(control.kill_trial, trial.id)
    return json_response({})


async def _pause(request: web.Request, what: str, instead: str) -> web.Response:
    """Determined pauses only generic tasks and refuses any other (400 here, not a 5xx): a
    trial's task is paused with its experiment."""
    trial, exp, _ = await _lookup(request)
    raise FailedPrecondition(f"{what} one task is not supported by dettui: {instead} its "
                             f"experiment (`det experiment {instead} {exp.id}`)")


@routes.post("/api/v1/tasks/{taskId}/pause")
async def pause_task(request: web.Request) -> web.Response:
    return await _pause(request, "pausing", "pause")


@routes.post("/api/v1/tasks/{taskId}/unpause")
async def unpause_task(request: web.Request) -> web.Response:
    return await _pause(request, "unpausing", "activate")


@routes.post("/api/v1/cleanup_logs")
async def cleanup_logs(request: web.Request) -> web.Response:
    """Admins only, as Determined. No task log expires on dettui (they are kept until their
    experiment is deleted), so none is removed."""
    require_admin(request)
    return json_response({"removedCount": 0})
