"""What is kept of an experiment: its logs (`det e|trial set log-retention`) and its
TensorBoard files (`det e delete-tb-files`)."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from dettui.errors import FailedPrecondition, InvalidArgument
from dettui.master import tensorboard_files
from dettui.master.http import appkeys
from dettui.master.http.body import read_json
from dettui.master.http.middleware import require_owner
from dettui.master.http.openapi import op
from dettui.master.http.wire import json_response, path_int
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store

log = logging.getLogger("dettui.master")
routes = web.RouteTableDef()
FOREVER = -1
MAX_DAYS = 32767


async def _days(request: web.Request) -> int:
    raw = await read_json(request)
    days = raw.get("numDays") if isinstance(raw, dict) else None
    if isinstance(days, bool) or not isinstance(days, int) or not FOREVER <= days <= MAX_DAYS:
        raise InvalidArgument(f"numDays: must be an integer from {FOREVER} to {MAX_DAYS}")
    return days


def _retained(days: int) -> web.Response:
    """dettui keeps every trial's logs until its experiment is deleted: forever is what it
    does already; a number of days it cannot honour, and says so."""
    if days == FOREVER:
        return json_response({})
    raise FailedPrecondition("log retention by days is not supported by dettui: a trial's logs "
                             "are kept until its experiment is deleted (`det e delete`); only "
                             "--forever applies")


@routes.put("/api/v1/experiments/{id}/retain_logs")
@op(body=dict)
async def experiment_retain_logs(request: web.Request) -> web.Response:
    exp = await request.app[appkeys.DB].read(exp_store.get, path_int(request, "id"))
    require_owner(request, exp.owner_id, f"experiment {exp.id}")
    return _retained(await _days(request))


@routes.put("/api/v1/trials/{id}/retain_logs")
@op(body=dict)
async def trial_retain_logs(request: web.Request) -> web.Response:
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, path_int(request, "id"))
    exp = await db.read(exp_store.get, trial.experiment_id)
    require_owner(request, exp.owner_id, f"trial {trial.id}")
    return _retained(await _days(request))


@routes.delete("/api/v1/experiments/{id}/tensorboard-files")
async def delete_tensorboard_files(request: web.Request) -> web.Response:
    """The experiment's TensorBoard event files out of its storage (its checkpoints stay)."""
    exp = await request.app[appkeys.DB].read(exp_store.get, path_int(request, "id"))
    require_owner(request, exp.owner_id, f"experiment {exp.id}")
    if not tensorboard_files.is_local(exp.config):
        raise FailedPrecondition(
            "dettui deletes TensorBoard files only from shared_fs or directory storage: remove "
            f"<storage>/<cluster id>/tensorboard/experiment/{exp.id} with your storage's tools")
    try:
        removed = await asyncio.to_thread(tensorboard_files.remove, exp.config,
                                          request.app[appkeys.CLUSTER_ID], exp.id)
    except OSError as exc:  # a link in the path, or no permission: named, not a 500
        raise InvalidArgument(f"cannot delete the TensorBoard files of experiment {exp.id}: "
                              f"{exc.strerror}") from exc
    log.info("experiment %d: TensorBoard files %s", exp.id,
             "deleted" if removed else "absent, nothing to delete")
    return json_response({})
