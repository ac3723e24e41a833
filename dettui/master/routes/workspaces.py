"""dettui's one workspace, "Uncategorized" (every experiment's `workspaceId` 1), and its
templates (none: config templates are not offered). Listed so that `det workspace list` and
`det template list` answer as a Determined master with one workspace and no templates."""

from __future__ import annotations

from aiohttp import web

from dettui.master.http import appkeys
from dettui.master.http.middleware import require_user
from dettui.master.http.openapi import op
from dettui.master.http.wire import json_response, paginate
from dettui.master.store import experiments as exp_store

routes = web.RouteTableDef()


@routes.get("/api/v1/workspaces")
@op(paged=True)
async def workspaces(request: web.Request) -> web.Response:
    require_user(request)
    settings = request.app[appkeys.SETTINGS]
    count = await request.app[appkeys.DB].read(exp_store.count)
    one = {"id": 1, "name": "Uncategorized", "archived": False, "username": "admin",
           "userId": 1, "immutable": True, "numProjects": 1, "numExperiments": count,
           "pinned": False, "state": "WORKSPACE_STATE_UNSPECIFIED", "errorMessage": "",
           "defaultComputePool": settings.default_pool, "defaultAuxPool": settings.default_pool}
    listed, pagination = paginate([one], request)
    return json_response({"workspaces": listed, "pagination": pagination})


@routes.get("/api/v1/templates")
@op(paged=True)
async def templates(request: web.Request) -> web.Response:
    require_user(request)
    listed, pagination = paginate([], request)
    return json_response({"templates": listed, "pagination": pagination})
