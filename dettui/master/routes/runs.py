"""Runs (Determined 0.38's name for trials in its newer routes): starting one (nothing to
record), and their metadata, which `core.train.set_metadata` and `get_metadata` write and
read."""

from __future__ import annotations

from aiohttp import web

from dettui.errors import InvalidArgument
from dettui.master import run_metadata
from dettui.master.http import appkeys
from dettui.master.http.middleware import check_trial, require_trial_writer, task_route
from dettui.master.http.openapi import op
from dettui.master.http.requests import RunMetadataBody, StartRunBody, parse
from dettui.master.http.wire import json_response, path_int
from dettui.master.store import trials as trial_store

routes = web.RouteTableDef()
@task_route
@op(body=StartRunBody)
async def start_run(request: web.Request) -> web.Response:
    """Determined 0.38's `POST /runs/start` (the run id is the trial id): nothing to record."""
    body = await parse(request, StartRunBody)
    await require_trial_writer(request, body.run_id)
    return json_response({})


routes.post("/api/v1/runs/start")(start_run)




@task_route
async def get_metadata(request: web.Request) -> web.Response:
    """The run's metadata (`{}` until some is set)."""
    run_id = path_int(request, "runId")
    check_trial(request, run_id)
    found = await request.app[appkeys.DB].read(trial_store.run_metadata, run_id)
    return json_response({"metadata": found})


@task_route
@op(body=RunMetadataBody)
async def post_metadata(request: web.Request) -> web.Response:
    """Replace the run's metadata: its trial's own allocation (`core.train.set_metadata`), or,
    for a detached run, its owner or an admin."""
    run_id = path_int(request, "runId")
    await require_trial_writer(request, run_id)
    body = await parse(request, RunMetadataBody)
    if body.run_id is not None and body.run_id != run_id:
        raise InvalidArgument(f"runId: {body.run_id} does not match the run {run_id} in the "
                              "path")
    run_metadata.check(body.metadata)
    db = request.app[appkeys.DB]
    await db.read(trial_store.get, run_id)
    stored = await request.app[appkeys.CLUSTER].dispatcher.run(trial_store.set_run_metadata,
                                                               run_id, body.metadata)
    return json_response({"metadata": stored})


routes.get("/api/v1/runs/{runId}/metadata")(get_metadata)
routes.post("/api/v1/runs/{runId}/metadata")(post_metadata)
