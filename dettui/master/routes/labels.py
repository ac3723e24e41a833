"""Experiment labels one at a time (`Experiment.add_label/remove_label` of Determined's SDK,
`det e label add|remove`): the labels after the change come back."""

from __future__ import annotations

from aiohttp import web

from dettui.errors import InvalidArgument
from dettui.master.http import appkeys
from dettui.master.http.middleware import require_owner
from dettui.master.http.wire import json_response, path_int
from dettui.master.store import experiments as exp_store

routes = web.RouteTableDef()
MAX_LABEL = 255  # characters of one label


async def _change(request: web.Request, add: bool) -> web.Response:
    exp_id = path_int(request, "id")
    label = request.match_info["label"]
    if not label.strip() or len(label) > MAX_LABEL:
        raise InvalidArgument(f"label: must be 1 to {MAX_LABEL} characters, not blank")
    exp = await request.app[appkeys.DB].read(exp_store.get, exp_id)
    require_owner(request, exp.owner_id, f"experiment {exp_id}")
    labels = await request.app[appkeys.CLUSTER].dispatcher.run(exp_store.change_label, exp_id,
                                                                label, add)
    return json_response({"labels": labels})


@routes.put("/api/v1/experiments/{id}/labels/{label}")
async def add_label(request: web.Request) -> web.Response:
    return await _change(request, True)


@routes.delete("/api/v1/experiments/{id}/labels/{label}")
async def remove_label(request: web.Request) -> web.Response:
    return await _change(request, False)
