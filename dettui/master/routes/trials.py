"""Trials: get one, read its metrics and workloads, kill it, and download its task's context.

Every user reads every trial; a task token reads only its own (`middleware.check_trial`). What
trials write is elsewhere: reports (`routes.reports`), detached trials (`routes.unmanaged`),
logs (`routes.logs`), runs (`routes.runs`)."""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from dettui import series
from dettui.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from dettui.master import offload
from dettui.master.http import appkeys, shapes
from dettui.master.http.middleware import (
    agent_too,
    check_trial,
    principal,
    require_owner,
    task_route,
)
from dettui.master.http.openapi import op
from dettui.master.http.wire import (
    STREAM_CHUNK,
    b64_response,
    b64_small,
    blob_response,
    encode_metrics,
    json_bytes,
    json_items,
    json_response,
    page_of,
    path_int,
    query_bool,
    query_int,
    ts,
)
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import control
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.page import Page
from dettui.master.store.records import Checkpoint, Metric, Trial
from dettui.master.views.trials import trial_views
from dettui.models import CheckpointState

routes = web.RouteTableDef()


@task_route
async def get_trial(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    check_trial(request, trial_id)
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, trial_id)
    exp = await db.read(exp_store.get, trial.experiment_id)
    views = await db.read(trial_views, exp, [trial],
                          request.app[appkeys.CLUSTER].agents.trial_usage.views)
    return json_response({"trial": views[0]})


routes.get("/api/v1/trials/{id}")(get_trial)


def metric_json(m: Metric) -> dict[str, Any]:
    return {"trialId": m.trial_id, "trialRunId": m.run_id, "stepsCompleted": m.steps_completed,
            "group": m.group, "reportTime": ts(m.report_time),
            "metrics": {"avgMetrics": encode_metrics(m.metrics), "batchMetrics": m.batch_metrics}}


MAX_POINTS = 10_000  # points per series a downsampled read may ask for


@task_route
@op(query={"group": str, "afterSteps": int, "maxPoints": int, "metric": str}, paged=True)
async def read_metrics(request: web.Request) -> web.StreamResponse:
    """A page of the trial's reports (by steps; `afterSteps` only those past a cursor), or
    with `maxPoints=N` (and `group`) each numeric metric as a series of at most N points, for
    a chart: the first and last kept, min and max of even buckets between (dettui.series)."""
    trial_id = path_int(request, "id")
    check_trial(request, trial_id)
    db = request.app[appkeys.DB]
    await db.read(trial_store.get, trial_id)
    group = request.query.get("group") or None
    after = query_int(request, "afterSteps", -1)
    if "maxPoints" in request.query:
        n = query_int(request, "maxPoints", 0)
        if not 2 <= n <= MAX_POINTS or group is None:
            raise InvalidArgument(f"maxPoints: must be between 2 and {MAX_POINTS}, with a group")
        raw = await db.read(metric_store.raw_series, trial_id, group, after)
        found = await offload.cpu(series.of_reports, raw, n, request.query.get("metric"))
        return json_response({"group": group, "series": found, "reports": len(raw),
                              "lastSteps": raw[-1][0] if raw else None})
    window = page_of(request).window(await db.read(metric_store.count, trial_id, group, after))
    want = window.end - window.start
    read = functools.partial(metric_store.chunk, trial_id=trial_id, group=group,
                             after_steps=after, desc=window.page.desc, offset=window.start)
    if want <= STREAM_CHUNK:
        rows, _ = await db.read(read, limit=want) if want else ([], None)
        items = await offload.cpu(_metric_items, rows, True)
        return web.Response(body=METRICS_HEAD + items + _metrics_tail(window.pagination()),
                            content_type="application/json")
    # A long read (a million reports) goes out in pieces: read, encoded and written one after
    # another, so neither the loop nor the master's memory holds the whole of it.
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(METRICS_HEAD)
    key: tuple[int, int] | None = None
    sent = 0
    while sent < want:
        rows, key = await db.read(read, key=key, limit=min(STREAM_CHUNK, want - sent))
        if not rows:
            break  # archived since it was counted
        await resp.write(await offload.cpu(_metric_items, rows, sent == 0))
        sent += len(rows)
    await resp.write(_metrics_tail({**window.pagination(), "endIndex": window.start + sent}))
    await resp.write_eof()
    return resp


METRICS_HEAD = b'{"metrics": ['


def _metrics_tail(pagination: dict[str, int]) -> bytes:
    return b'], "pagination": ' + json_bytes(pagination) + b"}"


def _metric_items(rows: list[Metric], first: bool) -> bytes:
    return json_items([metric_json(m) for m in rows], first)


routes.get("/api/v1/trials/{id}/metrics")(read_metrics)

WORKLOAD_FILTERS = {
    "": {"training", "validation", "checkpoint"},
    "FILTER_OPTION_UNSPECIFIED": {"training", "validation", "checkpoint"},
    "FILTER_OPTION_CHECKPOINT": {"checkpoint"},
    "FILTER_OPTION_VALIDATION": {"validation"},
    "FILTER_OPTION_CHECKPOINT_OR_VALIDATION": {"validation", "checkpoint"},
}
METRIC_TYPES = {"METRIC_TYPE_TRAINING": "training", "METRIC_TYPE_VALIDATION": "validation"}


@routes.get("/api/v1/trials/{id}/workloads")
@op(query={"filter": str, "group": str, "removeDeletedCheckpoints": bool, "sortKey": str,
           "metricType": str, "includeBatchMetrics": bool}, paged=True)
async def workloads(request: web.Request) -> web.Response:
    """Determined's GetTrialWorkloads (what `det e describe` and `det trial describe` show):
    each training and validation report and each checkpoint of the trial, by batches unless
    `sortKey` names a metric (`metricType` says of which group; reports without it go last)."""
    trial_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    await db.read(trial_store.get, trial_id)
    kinds = WORKLOAD_FILTERS.get(request.query.get("filter", ""))
    if kinds is None:
        raise InvalidArgument(f"query parameter filter: unknown option "
                              f"{request.query['filter']!r}; one of "
                              f"{', '.join(k for k in WORKLOAD_FILTERS if k)}")
    group = request.query.get("group")
    if group:  # only training and validation reports are workloads
        kinds = kinds & {group, "checkpoint"}
    reports = await db.read(metric_store.for_trial, trial_id) \
        if kinds & {"training", "validation"} else []
    ckpts: list[Checkpoint] = []
    if "checkpoint" in kinds:
        drop_deleted = query_bool(request, "removeDeletedCheckpoints") or False
        ckpts = [c for c in await db.read(ckpt_store.for_trial, trial_id)
                 if not (drop_deleted and c.state is CheckpointState.DELETED)]
    key = request.query.get("sortKey") or "batches"
    metric_group = METRIC_TYPES.get(request.query.get("metricType", ""), "validation")
    desc = request.query.get("orderBy") == "ORDER_BY_DESC"
    batch_metrics = query_bool(request, "includeBatchMetrics") or False
    # sorted, paged and encoded on the CPU pool: a trial may have a million reports
    body = await offload.cpu(_workloads, reports, kinds, ckpts, key, metric_group, desc,
                             page_of(request), batch_metrics)
    return web.Response(body=body, content_type="application/json")


def _workloads(reports: list[Metric], kinds: set[str], ckpts: list[Checkpoint], key: str,
               metric_group: str, desc: bool, want: Page, batch_metrics: bool) -> bytes:
    """A page of a trial's workloads (its reports of `kinds` and `ckpts`) by batches, or by a
    metric (`sortKey`) of `metric_group` (reports without it go last, either way), as
    Determined's JSON."""
    items: list[Metric | Checkpoint] = [m for m in reports if m.group in kinds]
    items += ckpts
    sign = -1 if desc else 1

    def order(item: Metric | Checkpoint) -> tuple[int, float, int, float]:
        steps, when = sign * (item.steps_completed or 0), sign * item.report_time
        if key == "batches":
            return (0, 0.0, steps, when)
        value = item.metrics.get(key) if isinstance(item, Metric) and \
            item.group == metric_group else None
        if not isinstance(value, int | float):
            return (1, 0.0, steps, when)  # without the metric: last, either way
        return (0, sign * float(value), steps, when)

    items.sort(key=order)
    window = want.window(len(items))
    out: list[dict[str, Any]] = []
    for item in window.of(items):
        if isinstance(item, Checkpoint):
            out.append({"checkpoint": {**shapes.checkpoint_workload(item),
                                       "metadata": item.metadata}})
            continue
        body: dict[str, Any] = {"avgMetrics": encode_metrics(item.metrics)}
        if batch_metrics:
            body["batchMetrics"] = item.batch_metrics
        out.append({item.group: {"totalBatches": item.steps_completed,
                                 "endTime": ts(item.report_time), "numInputs": 0,
                                 "metrics": body}})
    return json_bytes({"workloads": out, "pagination": window.pagination()})


@routes.post("/api/v1/trials/{id}/kill")
async def kill_trial(request: web.Request) -> web.Response:
    """`det trial kill`: this trial ends (CANCELED) at once; the experiment goes on."""
    trial_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, trial_id)
    exp = await db.read(exp_store.get, trial.experiment_id)
    require_owner(request, exp.owner_id, f"trial {trial_id}")
    if exp.unmanaged:
        raise FailedPrecondition(f"trial {trial_id} is detached: end it from its script")
    await request.app[appkeys.CLUSTER].dispatcher.run(control.kill_trial, trial_id)
    return json_response({})


@task_route
@agent_too
async def context_directory(request: web.Request) -> web.Response:
    """A task's model definition: for the task itself, users, and agents running it. One read
    (every trial's agent asks at its start): the trial, whether the asking agent runs it, and
    the context, a small one encoded there too; nothing is answered before the checks."""
    agent = principal(request).agent
    trial, runs_it, body, data = await request.app[appkeys.DB].read(
        _context, request.match_info["taskId"], agent is not None,
        agent.agent_id if agent is not None else None)
    check_trial(request, trial.id)
    if not runs_it:
        assert agent is not None
        raise PermissionDenied(f"task {trial.task_id} does not run on agent {agent.agent_id}")
    return blob_response(body) if body is not None else await b64_response("b64Tgz", data)


def _context(conn: Any, task_id: str, by_agent: bool, agent_id: str | None,
             ) -> tuple[Trial, bool, bytes | None, bytes | None]:
    """The task's trial; unless an agent asks (`by_agent`), True, else whether its id (None:
    its credential is not bound to one) has a part of one of the trial's live allocations;
    the context as the answer when small (`b64_small`), else as read."""
    trial = trial_store.by_task_id(conn, task_id)
    runs_it = not by_agent or any(
        agent_id in a.agents for a in trial_store.live_allocations_of_trial(conn, trial.id))
    data = exp_store.context(conn, trial.experiment_id)
    body = b64_small("b64Tgz", data)
    return trial, runs_it, body, data if body is None else None


routes.get("/api/v1/tasks/{taskId}/context_directory")(context_directory)
