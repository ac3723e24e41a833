"""Checkpoints: report (from training code), get, and record deletions."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from dettui.errors import InvalidArgument, PermissionDenied
from dettui.master import keys, serialize
from dettui.master.bodies import CheckpointBody, PatchCheckpointsBody, parse
from dettui.master.middleware import principal, read_json, require_owner, task_route
from dettui.master.openapi import op
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.wire import parse_ts
from dettui.paths import checkpoint_uuid

routes = web.RouteTableDef()
MAX_PATCH = 10_000  # checkpoints per PATCH


@task_route
@op(body=CheckpointBody)
async def report(request: web.Request) -> web.Response:
    body = await parse(request, CheckpointBody)
    checkpoint_uuid(body.uuid)
    if body.state not in (None, "STATE_COMPLETED", "STATE_UNSPECIFIED"):
        raise InvalidArgument("invalid state for reported checkpoint")
    db = request.app[keys.DB]
    trial = await db.run(trial_store.by_task_id, body.task_id)
    p = principal(request)
    if p.allocation is not None and p.allocation.trial_id != trial.id:
        raise PermissionDenied("an allocation token may only report its own trial's checkpoints")
    if "steps_completed" not in body.metadata:
        raise InvalidArgument("metadata for reported checkpoints requires 'steps_completed'")
    ckpt = await db.run(
        ckpt_store.report, uuid=body.uuid, trial_id=trial.id, experiment_id=trial.experiment_id,
        task_id=body.task_id, allocation_id=body.allocation_id,
        report_time=parse_ts(body.report_time) or time.time(), resources=body.resources,
        metadata=body.metadata, storage_id=body.storage_id,
    )
    request.app[keys.NOTIFIER].experiment_changed(trial.experiment_id, trial.id)
    return web.json_response({"checkpoint": serialize.checkpoint(ckpt, hparams=trial.hparams)})


routes.post("/api/v1/checkpoints")(report)


@task_route
async def get(request: web.Request) -> web.Response:
    db = request.app[keys.DB]
    ckpt = await db.run(ckpt_store.get, checkpoint_uuid(request.match_info["uuid"]))
    p = principal(request)
    if p.allocation is not None and ckpt.trial_id is not None:
        mine = await db.run(trial_store.get, p.allocation.trial_id)
        if ckpt.experiment_id != mine.experiment_id:
            raise PermissionDenied("an allocation token may only read its experiment's checkpoints")
    hparams = None
    if ckpt.trial_id is not None:
        hparams = (await db.run(trial_store.get, ckpt.trial_id)).hparams
    return web.json_response({"checkpoint": serialize.checkpoint(ckpt, hparams=hparams)})


routes.get("/api/v1/checkpoints/{uuid}")(get)


@task_route
@op(body=PatchCheckpointsBody)
async def patch(request: web.Request) -> web.Response:
    """Record which files of each checkpoint are left (after GC or `checkpoint.delete()`)."""
    raw = await read_json(request)
    items = raw.get("checkpoints") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise InvalidArgument("checkpoints: must be a list")
    if len(items) > MAX_PATCH:
        raise InvalidArgument(f"checkpoints: at most {MAX_PATCH} per request")
    left = [_left(item, i) for i, item in enumerate(items)]
    db = request.app[keys.DB]
    p = principal(request)
    mine = (await db.run(trial_store.get, p.allocation.trial_id)).experiment_id \
        if p.allocation is not None else None
    for uuid, _ in left:
        ckpt = await db.run(ckpt_store.get, uuid)
        if p.allocation is not None and ckpt.experiment_id != mine:
            raise PermissionDenied("an allocation token may only change its experiment's "
                                   "checkpoints")
        if p.allocation is None and ckpt.experiment_id is not None:
            exp = await db.run(exp_store.get, ckpt.experiment_id)
            require_owner(request, exp.owner_id, f"checkpoint {uuid}")
    await db.run(ckpt_store.set_resources_many, left)
    return web.json_response({})


routes.patch("/api/v1/checkpoints")(patch)


def _left(item: Any, i: int) -> tuple[str, dict[str, str]]:
    if not isinstance(item, dict):
        raise InvalidArgument(f"checkpoints[{i}]: must be an object")
    checkpoint_uuid(item.get("uuid"), f"checkpoints[{i}].uuid")
    res = item.get("resources") or {}
    res = res.get("resources", {}) if isinstance(res, dict) else None
    if not isinstance(res, dict):
        raise InvalidArgument(f"checkpoints[{i}].resources.resources: must be an object")
    return item["uuid"], {str(k): str(v) for k, v in res.items()}
