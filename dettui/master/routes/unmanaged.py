"""Unmanaged (detached) trials, WIRE §8: scripts outside the cluster create, start, beat and end
their trials; only the experiment's owner or an admin may."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dettui.errors import InvalidArgument
from dettui.master.http import appkeys
from dettui.master.http.middleware import require_owner
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    CreateTrialBody,
    PatchTrialBody,
    PutTrialBody,
    StartTrialBody,
    parse,
)
from dettui.master.http.wire import json_response, path_int
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from dettui.master.views.trials import trial_views
from dettui.models import TrialState

routes = web.RouteTableDef()
SETTABLE = (TrialState.RUNNING, TrialState.PAUSED, TrialState.COMPLETED, TrialState.CANCELED,
            TrialState.ERROR)


@routes.post("/api/v1/trials")
@op(body=CreateTrialBody)
async def create_trial(request: web.Request) -> web.Response:
    body = await parse(request, CreateTrialBody)
    return json_response({"trial": await _new_trial(request, body, None)})


@routes.put("/api/v1/trials")
@op(body=PutTrialBody)
async def put_trial(request: web.Request) -> web.Response:
    """Create a trial, or return the one the experiment already has with that external id."""
    body = await parse(request, PutTrialBody)
    external_id = body.external_trial_id.strip()
    if not external_id:
        raise InvalidArgument("externalTrialId: must not be empty")
    return json_response(
        {"trial": await _new_trial(request, body.create_trial_request, external_id)})


async def _new_trial(request: web.Request, body: CreateTrialBody,
                     external_id: str | None) -> dict[str, Any]:
    if not body.unmanaged:
        raise InvalidArgument("only unmanaged trials are supported")
    db = request.app[appkeys.DB]
    exp = await db.read(exp_store.get, body.experiment_id)
    require_owner(request, exp.owner_id, f"experiment {exp.id}")
    if not exp.unmanaged:
        raise InvalidArgument(f"only unmanaged trials are supported: experiment {exp.id} is "
                              "managed, its searcher creates its trials")
    trial = await request.app[appkeys.CLUSTER].dispatcher.run(
        unmanaged_store.create_trial, exp.id, body.hparams or {}, external_id)
    assert trial is not None
    exp = await db.read(exp_store.get, exp.id)
    return dict((await db.read(trial_views, exp, [trial]))[0])


async def _unmanaged_trial(request: web.Request, body_trial_id: int | None) -> int:
    trial_id = path_int(request, "id")
    if body_trial_id is not None and body_trial_id != trial_id:
        raise InvalidArgument(f"trialId: {body_trial_id} does not match the trial {trial_id} "
                              "in the path")
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, trial_id)
    exp = await db.read(exp_store.get, trial.experiment_id)
    require_owner(request, exp.owner_id, f"experiment {exp.id}")
    if not exp.unmanaged:
        raise InvalidArgument("only unmanaged trials are supported")
    return trial_id


@routes.post("/api/v1/trials/{id}/start")
@op(body=StartTrialBody)
async def start_trial(request: web.Request) -> web.Response:
    """A detached script (re)starts its trial: a new run id; from the second run on, the
    checkpoint to resume from."""
    body = await parse(request, StartTrialBody)
    trial_id = await _unmanaged_trial(request, body.trial_id)
    started = await request.app[appkeys.CLUSTER].dispatcher.run(unmanaged_store.start_trial,
                                                                trial_id, bool(body.resume))
    assert started is not None
    trial, latest = started
    return json_response({
        "trialRunId": trial.run_id,
        "stepsCompleted": (latest.steps_completed or 0) if latest else 0,
        "latestCheckpoint": latest.uuid if latest else None,
    })


def _settable_state(raw: str | None) -> TrialState | None:
    if raw in (None, "", "STATE_UNSPECIFIED"):
        return None
    assert raw is not None
    name = raw if raw.startswith("STATE_") else f"STATE_{raw}"
    choices = ", ".join(s.value for s in SETTABLE)
    try:
        state = TrialState(name)
    except ValueError:
        raise InvalidArgument(f"state: unknown trial state {raw!r} (one of {choices})") from None
    if state not in SETTABLE:
        raise InvalidArgument(f"state: {state.value} cannot be set on an unmanaged trial "
                              f"(one of {choices})")
    return state


@routes.patch("/api/v1/trials/{id}")
@op(body=PatchTrialBody)
async def patch_trial(request: web.Request) -> web.Response:
    """A detached trial's heartbeat (no state) or state change; its experiment follows."""
    body = await parse(request, PatchTrialBody)
    state = _settable_state(body.state)
    trial_id = await _unmanaged_trial(request, body.trial_id)
    db = request.app[appkeys.DB]
    trial = await request.app[appkeys.CLUSTER].dispatcher.run(unmanaged_store.patch_trial,
                                                              trial_id, state)
    assert trial is not None
    exp = await db.read(exp_store.get, trial.experiment_id)
    views = await db.read(trial_views, exp, [trial])
    return json_response({"trial": views[0]})
