"""Checkpoints: report (from training code: only the trial's own allocation, of files it
wrote, within the master's checkpoint storage quota), get, and record deletions.

A report over the quota (store.checkpoint_quota) is refused with a message naming the quota,
the usage and what to delete; the Core API raises it in the trial, and the experiment stops in
ERROR. Its files, which the trial wrote before it reported them, are removed by the Core API in
the trial, as the trial's own user; the master removes nothing a refused report names (it
cannot tell who made a directory in the shared storage, and a report naming another trial's
checkpoint still being written would have the master delete it)."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from typing import Any

from aiohttp import web

from dettui.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from dettui.master import checkpoint_files, checkpoint_gc
from dettui.master.http import appkeys, shapes
from dettui.master.http.body import read_json
from dettui.master.http.middleware import (
    principal,
    require_admin,
    require_owner,
    require_trial_writer,
    task_route,
)
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    CheckpointBody,
    CheckpointMetadataBody,
    DeleteCheckpointsBody,
    PatchCheckpointsBody,
    RemoveCheckpointFilesBody,
    TrialSourceInfoBody,
    parse,
)
from dettui.master.http.wire import big_json_response, json_response, page_of, parse_ts, path_int
from dettui.master.store import checkpoint_quota as quota_store
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.checkpoint_quota import Quota
from dettui.master.store.records import Allocation, Checkpoint, Experiment, Trial
from dettui.master.views import checkpoints
from dettui.models import CheckpointState
from dettui.paths import checkpoint_uuid
from dettui.storage import storage_base

routes = web.RouteTableDef()
MAX_PATCH = 10_000  # checkpoints per PATCH


@task_route
@op(body=CheckpointBody)
async def report(request: web.Request) -> web.Response:
    body = await parse(request, CheckpointBody)
    checkpoint_uuid(body.uuid)
    if body.state not in (None, "STATE_COMPLETED", "STATE_UNSPECIFIED"):
        raise InvalidArgument("invalid state for reported checkpoint")
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.by_task_id, body.task_id)
    await require_trial_writer(request, trial.id, body.allocation_id or None)
    if "steps_completed" not in body.metadata:
        raise InvalidArgument("metadata for reported checkpoints requires 'steps_completed'")
    alloc = principal(request).allocation
    if alloc is not None:
        await _written_by(request, alloc, trial, body.uuid)
    settings = request.app[appkeys.SETTINGS]
    quota = Quota(settings.checkpoint_quota, settings.checkpoint_quota_per_user)
    done = await request.app[appkeys.CLUSTER].dispatcher.run(
        quota_store.report, quota, uuid=body.uuid, trial_id=trial.id,
        experiment_id=trial.experiment_id, task_id=body.task_id,
        allocation_id=alloc.id if alloc else body.allocation_id,
        report_time=parse_ts(body.report_time) or time.time(), resources=body.resources,
        metadata=body.metadata, storage_id=body.storage_id,
    )
    assert done is not None
    if done.checkpoint is None:
        raise QuotaExceeded(done.refusal or "checkpoint storage quota exceeded")
    return json_response({"checkpoint": shapes.checkpoint(done.checkpoint,
                                                             hparams=trial.hparams)})


routes.post("/api/v1/checkpoints")(report)


async def _written_by(request: web.Request, alloc: Allocation, trial: Trial, uuid: str) -> None:
    """A report names files its allocation wrote; it cannot adopt storage that is not its own.
    A uuid another trial has is refused by the store (409). Where the master sees the
    experiment's storage (shared_fs, directory), the uuid's entry must be a real directory
    (a symlink could lead to another trial's checkpoint, which the master would then serve
    and delete as this trial's), made after the allocation started: one whose inode changed
    last before that (ctime never goes back) was there already, left by another trial. A
    re-report (client retry) of a checkpoint this trial already has is not checked again.
    What this cannot see: a directory another trial makes while this allocation runs (the
    sandbox's file permissions keep trials out of each other's directories)."""
    db = request.app[appkeys.DB]
    try:
        if (await db.read(ckpt_store.get, uuid)).trial_id == trial.id:
            return
    except NotFound:
        pass
    exp = await db.read(exp_store.get, trial.experiment_id)
    problem = await asyncio.to_thread(_storage_problem, exp.config, uuid, alloc.start_time)
    if problem:
        raise PermissionDenied(f"checkpoint {uuid}: {problem}: a report may only name files "
                               f"that allocation {alloc.id} wrote")


CLOCK_SLACK = 1.0  # seconds a directory's ctime may be before its allocation's start


def _storage_problem(config: dict[str, Any], uuid: str, started: float) -> str | None:
    """Why the uuid's entry in the experiment's storage is not this allocation's, if the
    master can see that storage (None when it cannot, or when it looks right)."""
    if (config.get("checkpoint_storage") or {}).get("type") not in STORAGE_SEEN:
        return None
    try:
        st = os.lstat(storage_base(config) / uuid)
    except OSError:
        return None  # not on the master's machine (or not there yet): nothing to compare
    if not stat.S_ISDIR(st.st_mode):
        return "its storage entry is not a directory (a symlink or a file)"
    if st.st_ctime < started - CLOCK_SLACK:
        return (f"its directory was there before the allocation started "
                f"({time.ctime(st.st_ctime)} < {time.ctime(started)})")
    return None


STORAGE_SEEN = ("shared_fs", "directory")  # storage types that are paths on a file system


async def _readable(request: web.Request, uuid: str) -> Checkpoint:
    """The checkpoint, if the caller may read it (an allocation: only its experiment's)."""
    db = request.app[appkeys.DB]
    ckpt = await db.read(ckpt_store.get, checkpoint_uuid(uuid))
    p = principal(request)
    if p.allocation is not None and ckpt.trial_id is not None:
        mine = await db.read(trial_store.get, p.allocation.trial_id)
        if ckpt.experiment_id != mine.experiment_id:
            raise PermissionDenied("an allocation token may only read its experiment's checkpoints")
    return ckpt


@task_route
async def get(request: web.Request) -> web.Response:
    ckpt = await _readable(request, request.match_info["uuid"])
    db = request.app[appkeys.DB]
    return json_response({"checkpoint": await db.read(checkpoints.view, ckpt)})


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
    db = request.app[appkeys.DB]
    p = principal(request)
    mine = (await db.read(trial_store.get, p.allocation.trial_id)).experiment_id \
        if p.allocation is not None else None
    for uuid, _ in left:
        ckpt = await db.read(ckpt_store.get, uuid)
        if p.allocation is not None and ckpt.experiment_id != mine:
            raise PermissionDenied("an allocation token may only change its experiment's "
                                   "checkpoints")
        if p.allocation is None and ckpt.experiment_id is not None:
            exp = await db.read(exp_store.get, ckpt.experiment_id)
            require_owner(request, exp.owner_id, f"checkpoint {uuid}")
    await request.app[appkeys.CLUSTER].dispatcher.run(ckpt_store.set_resources_many, left)
    return json_response({})


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


@task_route
@op(body=DeleteCheckpointsBody)
async def delete(request: web.Request) -> web.Response:
    """`det checkpoint delete`: files out of storage, records DELETED (owners and admins)."""
    body = await parse(request, DeleteCheckpointsBody)
    if len(body.checkpoint_uuids) > MAX_PATCH:
        raise InvalidArgument(f"checkpointUuids: at most {MAX_PATCH} per request")
    db = request.app[appkeys.DB]
    by_exp: dict[int, list[Checkpoint]] = {}
    for i, raw in enumerate(body.checkpoint_uuids):
        ckpt = await db.read(ckpt_store.get, checkpoint_uuid(raw, f"checkpointUuids[{i}]"))
        if ckpt.experiment_id is None:
            raise FailedPrecondition(f"checkpoint {ckpt.uuid} belongs to no experiment")
        by_exp.setdefault(ckpt.experiment_id, []).append(ckpt)
    exps = {eid: await db.read(exp_store.get, eid) for eid in by_exp}
    for eid, ckpts in by_exp.items():
        require_owner(request, exps[eid].owner_id, f"checkpoint {ckpts[0].uuid}")
    dispatcher = request.app[appkeys.CLUSTER].dispatcher
    for eid, ckpts in by_exp.items():
        await dispatcher.run(ckpt_store.set_resources_many,
                             await checkpoint_gc.delete(exps[eid], ckpts))
    return json_response({})


routes.delete("/api/v1/checkpoints")(delete)


@routes.post("/api/v1/checkpoints/rm")
@op(body=RemoveCheckpointFilesBody)
async def remove_files(request: web.Request) -> web.Response:
    """Determined's CheckpointsRemoveFiles (`det checkpoint rm`, the SDK's `remove_files`):
    the files matching the globs go out of storage (owners and admins); no globs: the
    resources are listed again. Records end DELETED when nothing is left, else
    PARTIALLY_DELETED if files went."""
    body = await parse(request, RemoveCheckpointFilesBody)
    globs = checkpoint_files.check_globs(body.checkpoint_globs)
    if len(body.checkpoint_uuids) > MAX_PATCH:
        raise InvalidArgument(f"checkpointUuids: at most {MAX_PATCH} per request")
    uuids = [checkpoint_uuid(u, f"checkpointUuids[{i}]")
             for i, u in enumerate(body.checkpoint_uuids)]
    db = request.app[appkeys.DB]
    found, missing = [], []
    for uuid in dict.fromkeys(uuids):
        try:
            found.append(await db.read(ckpt_store.get, uuid))
        except NotFound:
            missing.append(uuid)
    if missing:
        raise NotFound(f"checkpoints not found: {', '.join(missing)}")
    by_exp = await _owned_by_experiment(request, found)
    dispatcher = request.app[appkeys.CLUSTER].dispatcher
    for exp, ckpts in by_exp:
        await dispatcher.run(ckpt_store.set_resources_many,
                             await checkpoint_gc.remove_files(exp, ckpts, globs))
    return json_response({})


async def _owned_by_experiment(request: web.Request, ckpts: list[Checkpoint],
                               ) -> list[tuple[Experiment, list[Checkpoint]]]:
    """The checkpoints grouped by experiment, once the caller is known to own each (or be an
    admin)."""
    groups: dict[int, list[Checkpoint]] = {}
    for ckpt in ckpts:
        if ckpt.experiment_id is None:
            raise FailedPrecondition(f"checkpoint {ckpt.uuid} belongs to no experiment")
        groups.setdefault(ckpt.experiment_id, []).append(ckpt)
    out = []
    for exp_id, group in groups.items():
        exp = await request.app[appkeys.DB].read(exp_store.get, exp_id)
        require_owner(request, exp.owner_id, f"checkpoint {group[0].uuid}")
        out.append((exp, group))
    return out


@task_route
@op(body=CheckpointMetadataBody)
async def post_metadata(request: web.Request) -> web.Response:
    """Determined's PostCheckpointMetadata (the SDK's add_metadata/remove_metadata): replace
    the checkpoint's metadata record; its trial's own allocation, its owner or an admin."""
    uuid = checkpoint_uuid(request.match_info["uuid"])
    body = await parse(request, CheckpointMetadataBody)
    if body.checkpoint.uuid not in (None, "", uuid):
        raise InvalidArgument(f"checkpoint.uuid: {body.checkpoint.uuid[:40]!r} does not match "
                              f"the checkpoint {uuid} in the path")
    db = request.app[appkeys.DB]
    ckpt = await db.read(ckpt_store.get, uuid)
    p = principal(request)
    if p.allocation is not None:
        if ckpt.trial_id != p.allocation.trial_id:
            raise PermissionDenied("an allocation token may only change its own trial's "
                                   "checkpoints")
    elif ckpt.experiment_id is None:
        require_admin(request)
    else:
        exp = await db.read(exp_store.get, ckpt.experiment_id)
        require_owner(request, exp.owner_id, f"checkpoint {uuid}")
    ckpt = await request.app[appkeys.CLUSTER].dispatcher.run(
        ckpt_store.set_metadata, uuid, body.checkpoint.metadata)
    assert ckpt is not None
    return json_response({"checkpoint": await db.read(checkpoints.view, ckpt)})


routes.post("/api/v1/checkpoints/{uuid}/metadata")(post_metadata)


@task_route
async def download(request: web.Request) -> web.StreamResponse:
    """The checkpoint's files as a tar.gz, for clients that cannot reach its storage."""
    ckpt = await _readable(request, request.match_info["uuid"])
    if ckpt.experiment_id is None:
        raise FailedPrecondition(f"checkpoint {ckpt.uuid} belongs to no experiment")
    if ckpt.state not in (CheckpointState.COMPLETED, CheckpointState.PARTIALLY_DELETED):
        raise FailedPrecondition(f"checkpoint {ckpt.uuid} is {ckpt.state.value}: only "
                                 "COMPLETED or PARTIALLY_DELETED checkpoints can be downloaded")
    exp = await request.app[appkeys.DB].read(exp_store.get, ckpt.experiment_id)
    root = await asyncio.to_thread(checkpoint_files.directory, exp.config, ckpt.uuid)
    return await checkpoint_files.stream(request, root, ckpt.uuid)


routes.get("/checkpoints/{uuid}")(download)


@routes.get("/api/v1/trials/{id}/checkpoints")
@op(query=checkpoints.LIST_QUERY, paged=True)
async def trial_checkpoints(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, trial_id)
    exp = await db.read(exp_store.get, trial.experiment_id)
    return await big_json_response(await checkpoints.listed(
        db, page_of(request), request.query, exp, trial_id=trial_id))


# --- which trials use a checkpoint (inference, fine-tuning) ---------------------------------

MAX_SOURCE_METRICS = 1000  # reports per linked trial, as Determined's


@task_route
@op(body=TrialSourceInfoBody)
async def report_source(request: web.Request) -> web.Response:
    """Determined's ReportTrialSourceInfo: the trial (its own allocation; a detached trial's
    owner or an admin) says it uses the checkpoint."""
    info = (await parse(request, TrialSourceInfoBody)).trial_source_info
    if info.trial_source_info_type not in ckpt_store.SOURCE_KINDS:
        raise InvalidArgument(f"trialSourceInfo.trialSourceInfoType: one of "
                              f"{', '.join(ckpt_store.SOURCE_KINDS)}")
    uuid = checkpoint_uuid(info.checkpoint_uuid, "trialSourceInfo.checkpointUuid")
    await require_trial_writer(request, info.trial_id)
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, info.trial_id)
    await request.app[appkeys.CLUSTER].dispatcher.run(
        ckpt_store.link_trial, trial.id, uuid, info.trial_source_info_type, info.model_id,
        info.model_version)
    return json_response({"trialId": trial.id, "checkpointUuid": uuid})


routes.post("/api/v1/trial-source-info")(report_source)


@task_route
@op(query={"metricGroup": str, "trialSourceInfoType": str})
async def source_metrics(request: web.Request) -> web.Response:
    """Determined's GetTrialMetricsByCheckpoint (`Checkpoint.get_metrics()`): the reports of
    the trials that use the checkpoint (of one group, and one kind of use, if asked), those the
    caller may read."""
    ckpt = await _readable(request, request.match_info["uuid"])
    kind = request.query.get("trialSourceInfoType") or None
    if kind is not None and kind not in ckpt_store.SOURCE_KINDS:
        raise InvalidArgument(f"query parameter trialSourceInfoType: one of "
                              f"{', '.join(ckpt_store.SOURCE_KINDS)}")
    group = request.query.get("metricGroup") or None
    db = request.app[appkeys.DB]
    p = principal(request)
    mine = (await db.read(trial_store.get, p.allocation.trial_id)).experiment_id \
        if p.allocation is not None else None
    out = []
    for trial_id in await db.read(ckpt_store.linked_trials, ckpt.uuid, kind):
        if mine is not None and (await db.read(trial_store.get, trial_id)).experiment_id != mine:
            continue  # as Determined: trials the caller may not see are left out
        rows = await db.read(metric_store.for_trial, trial_id, group, limit=MAX_SOURCE_METRICS)
        out.extend(shapes.metrics_report(m, i) for i, m in enumerate(rows))
    return await big_json_response({"metrics": out})


routes.get("/api/v1/checkpoints/{uuid}/metrics")(source_metrics)
