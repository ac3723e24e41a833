"""Trials: get, metrics (report and read), progress, early exit, logs (write and follow), and
the unmanaged (detached) trials that scripts outside the cluster create, start and end.

Every user reads every trial; writes to a trial come only from its own allocation's token, or,
for a detached trial, from its owner or an admin (`middleware.require_trial_writer`)."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from aiohttp import web

from dettui import series
from dettui.errors import DettuiError, FailedPrecondition, InvalidArgument, PermissionDenied
from dettui.master import offload
from dettui.master.http import appkeys, shapes
from dettui.master.http.body import read_json
from dettui.master.http.middleware import (
    agent_too,
    check_trial,
    principal,
    require_owner,
    require_trial_writer,
    task_route,
)
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    CreateTrialBody,
    EarlyExitBody,
    PatchTrialBody,
    ProgressBody,
    PutTrialBody,
    ReportMetricsBatchBody,
    ReportMetricsBody,
    RunnerMetadataBody,
    StartRunBody,
    StartTrialBody,
    TaskLogsBody,
    parse,
)
from dettui.master.http.wire import (
    STREAM_CHUNK,
    b64_response,
    decode_number,
    encode_metrics,
    json_bytes,
    json_items,
    json_response,
    page_of,
    parse_ts,
    path_int,
    query_bool,
    query_int,
    ts,
)
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import control, reports
from dettui.master.store import experiments as exp_store
from dettui.master.store import logs as log_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from dettui.master.store.metrics import MetricReport
from dettui.master.store.page import Page
from dettui.master.store.records import Checkpoint, Metric
from dettui.master.views.trials import trial_views
from dettui.models import CheckpointState, TrialState

log = logging.getLogger("dettui.master.trials")

routes = web.RouteTableDef()
MAX_METRICS_BATCH = 10_000  # reports in one batch request
MAX_METRICS_BATCH_BODY = 64 * 1024 * 1024


@task_route
async def get_trial(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    check_trial(request, trial_id)
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.get, trial_id)
    exp = await db.read(exp_store.get, trial.experiment_id)
    views = await db.read(trial_views, exp, [trial])
    return json_response({"trial": views[0]})


routes.get("/api/v1/trials/{id}")(get_trial)


@task_route
@op(body=ReportMetricsBody, max_body=metric_store.MAX_REPORT_BODY)
async def report_metrics(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    await require_trial_writer(request, trial_id)
    body = await parse(request, ReportMetricsBody)
    (err,) = await _ingest(request, trial_id, [body])
    if err is not None:
        raise err
    return json_response({})


@task_route
@op(body=ReportMetricsBatchBody, max_body=MAX_METRICS_BATCH_BODY)
async def report_metrics_batch(request: web.Request) -> web.Response:
    """dettui's own: many reports of one trial in one request (the Core API's client coalesces
    what it has queued). Each is checked and applied as if sent alone; the answer says which
    were refused, by their index."""
    trial_id = path_int(request, "id")
    await require_trial_writer(request, trial_id)
    body = await parse(request, ReportMetricsBatchBody)
    if len(body.reports) > MAX_METRICS_BATCH:
        raise InvalidArgument(f"reports: at most {MAX_METRICS_BATCH} in one request")
    errors = await _ingest(request, trial_id, body.reports)
    later = [err for err in errors if err is not None and err.retry_after is not None]
    if later and len(later) == len(errors):  # none stored, for now only (a full disk): a 503
        raise later[0]
    return json_response({"refused": [  # the Core API sends those with a retryAfter again
        {"index": i, "message": str(err)}
        | ({} if err.retry_after is None else {"retryAfter": err.retry_after})
        for i, err in enumerate(errors) if err is not None]})


async def _ingest(request: web.Request, trial_id: int,
                  bodies: list[ReportMetricsBody]) -> list[DettuiError | None]:
    """Check and commit reports (a group commit with other trials'; validations reach the
    searcher in the same commit, `metric_store.report_many`)."""
    reports: list[MetricReport | DettuiError] = []
    for body in bodies:
        try:
            reports.append(_metric_report(trial_id, body))
        except DettuiError as exc:
            reports.append(exc)
    valid = [r for r in reports if isinstance(r, MetricReport)]
    done = iter(await request.app[appkeys.INGEST].submit(*valid))
    return [r if isinstance(r, DettuiError) else next(done) for r in reports]


def _metric_report(trial_id: int, body: ReportMetricsBody) -> MetricReport:
    group = body.group
    if not group or "." in group:
        raise InvalidArgument(f"invalid metric group {group!r}: must be non-empty, without '.'")
    m = body.metrics
    if m.trial_id != trial_id:
        raise InvalidArgument(f"metrics.trialId {m.trial_id} does not match trial {trial_id}")
    avg, batch = _metric_values(m.metrics)
    return MetricReport(trial_id, m.trial_run_id, group, m.steps_completed,
                        parse_ts(m.report_time) or time.time(), avg, batch)


def _metric_values(raw: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    avg = raw.get("avgMetrics", raw.get("avg_metrics"))
    if not isinstance(avg, dict):
        raise InvalidArgument("metrics.metrics.avgMetrics: must be an object")
    avg = {k: decode_number(v) for k, v in avg.items()}
    for key in ("epoch", "epochs"):
        if key in avg and not isinstance(avg[key], int | float):
            raise InvalidArgument(f"metrics.metrics.avgMetrics.{key}: must be a number")
    batch = raw.get("batchMetrics", raw.get("batch_metrics"))
    if batch is not None and not isinstance(batch, list):
        raise InvalidArgument("metrics.metrics.batchMetrics: must be a list")
    return avg, batch


routes.post("/api/v1/trials/{id}/metrics")(report_metrics)
routes.post("/api/v1/trials/{id}/metrics/batch")(report_metrics_batch)


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


@task_route
@op(body=ProgressBody)
async def progress(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    await require_trial_writer(request, trial_id)
    body = await parse(request, ProgressBody)
    if not 0 <= body.progress <= 1:
        raise InvalidArgument("progress: must be between 0 and 1")
    await request.app[appkeys.CLUSTER].dispatcher.run(reports.progress, trial_id, body.progress)
    return json_response({})


routes.post("/api/v1/trials/{id}/progress")(progress)


@task_route
@op(body=EarlyExitBody)
async def early_exit(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    await require_trial_writer(request, trial_id)
    body = await parse(request, EarlyExitBody)
    allowed = {"EXITED_REASON_INVALID_HP", "EXITED_REASON_INIT_INVALID_HP",
               "EXITED_REASON_UNSPECIFIED"}
    if body.reason not in allowed:
        raise InvalidArgument("should not report special exit reason")
    await request.app[appkeys.CLUSTER].dispatcher.run(reports.early_exit, trial_id, body.reason)
    return json_response({})


routes.post("/api/v1/trials/{id}/early_exit")(early_exit)


@task_route
@op(body=RunnerMetadataBody)
async def runner_metadata(request: web.Request) -> web.Response:
    trial_id = path_int(request, "id")
    await require_trial_writer(request, trial_id)
    body = await parse(request, RunnerMetadataBody)
    await request.app[appkeys.CLUSTER].dispatcher.run(reports.runner_state, trial_id, body.state)
    return json_response({})


routes.post("/api/v1/trials/{id}/runner/metadata")(runner_metadata)


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
@op(body=TaskLogsBody)
async def post_task_logs(request: web.Request) -> web.Response:
    """Determined's ship_logs.py endpoint (task token)."""
    body = await parse(request, TaskLogsBody)
    db = request.app[appkeys.DB]
    rows, trial_ids = [], set()
    for line in body.logs:
        trial = await db.read(trial_store.by_task_id, line.task_id)
        if trial.id not in trial_ids:
            await require_trial_writer(request, trial.id)
        trial_ids.add(trial.id)
        rows.append({"trial_id": trial.id, "task_id": line.task_id,
                     "allocation_id": line.allocation_id, "agent_id": line.agent_id,
                     "container_id": line.container_id, "rank_id": line.rank_id,
                     "stdtype": line.stdtype, "source": line.source or "task",
                     "level": (line.level or "").removeprefix("LOG_LEVEL_") or None,
                     "timestamp": parse_ts(line.timestamp) or time.time(), "log": line.log})
    await request.app[appkeys.CLUSTER].dispatcher.run(log_store.insert, rows)
    return json_response({})


routes.post("/api/v1/task/logs")(post_task_logs)


@task_route
@agent_too
async def context_directory(request: web.Request) -> web.Response:
    """A task's model definition: for the task itself, users, and agents running it."""
    db = request.app[appkeys.DB]
    trial = await db.read(trial_store.by_task_id, request.match_info["taskId"])
    check_trial(request, trial.id)
    agent = principal(request).agent
    if agent is not None and not any(
            agent.agent_id in a.agents for a in await db.read(trial_store.live_allocations)
            if a.trial_id == trial.id):
        raise PermissionDenied(f"task {trial.task_id} does not run on agent {agent.agent_id}")
    return await b64_response("b64Tgz", await db.read(exp_store.context, trial.experiment_id))


routes.get("/api/v1/tasks/{taskId}/context_directory")(context_directory)


# --- unmanaged (detached) trials, WIRE §8 ---------------------------------------------------

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


@task_route
@op(body=StartRunBody)
async def start_run(request: web.Request) -> web.Response:
    """Determined 0.38's `POST /runs/start` (the run id is the trial id): nothing to record."""
    body = await parse(request, StartRunBody)
    await require_trial_writer(request, body.run_id)
    return json_response({})


routes.post("/api/v1/runs/start")(start_run)


@routes.post("/task-logs")
@op(body=list)
async def post_core_v2_logs(request: web.Request) -> web.Response:
    """Determined's detached log shipper: a JSON array of {task_id, timestamp, rank?, log}."""
    raw = await read_json(request)
    if not isinstance(raw, list):
        raise InvalidArgument("request body must be a JSON array of log entries")
    db = request.app[appkeys.DB]
    rows, trial_ids = [], set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("task_id"), str) or \
                not isinstance(item.get("log"), str):
            raise InvalidArgument(f"[{i}]: expected an object with string task_id and log")
        trial = await db.read(trial_store.by_task_id, item["task_id"])
        if trial.id not in trial_ids:
            await require_trial_writer(request, trial.id)
        rank = str(item.get("rank") or "")
        trial_ids.add(trial.id)
        rows.append({"trial_id": trial.id, "task_id": trial.task_id, "allocation_id": None,
                     "agent_id": None, "container_id": None,
                     "rank_id": int(rank) if rank.isdigit() else None,
                     "stdtype": None, "source": "task", "level": None,
                     "timestamp": parse_ts(item.get("timestamp")) or time.time(),
                     "log": item["log"]})
    await request.app[appkeys.CLUSTER].dispatcher.run(log_store.insert, rows)
    return json_response({})
