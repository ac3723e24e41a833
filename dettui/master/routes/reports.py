"""What a trial reports while it runs: metrics (one report, or a batch), progress, early exit
and its runner's metadata. Only the trial's own allocation writes to it, or, for a detached
trial, its owner or an admin (`middleware.require_trial_writer`)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, TypeVar

from aiohttp import web

from dettui.errors import DettuiError, InvalidArgument
from dettui.master.http import appkeys
from dettui.master.http.middleware import require_trial_writer, task_route
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    EarlyExitBody,
    Message,
    ProgressBody,
    ReportMetricsBatchBody,
    ReportMetricsBody,
    RunnerMetadataBody,
    parse,
)
from dettui.master.http.wire import decode_number, json_response, parse_ts, path_int
from dettui.master.store import metrics as metric_store
from dettui.master.store import reports
from dettui.master.store.metrics import MetricReport

routes = web.RouteTableDef()
MAX_METRICS_BATCH = 10_000  # reports in one batch request
MAX_METRICS_BATCH_BODY = 64 * 1024 * 1024


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
    combined = _combine(reports)
    valid = [r for r, _ in combined if isinstance(r, MetricReport)]
    done = iter(await request.app[appkeys.INGEST].submit(*valid))
    out: list[DettuiError | None] = [None] * len(reports)
    for r, indices in combined:
        err = r if isinstance(r, DettuiError) else next(done)
        for i in indices:
            out[i] = err
    return out


def _combine(reports: list[MetricReport | DettuiError]
             ) -> list[tuple[MetricReport | DettuiError, list[int]]]:
    """A batch's reports with the ones in a row of one step merged first (as the store would
    merge them; no validation, no batchMetrics, no key twice, at most MAX_METRIC_KEYS keys
    together), each with the indices it holds: the store merges a step once a batch, not once
    a report (10,000 one-key reports at one step took minutes, each merge rewriting the
    step's report and refolding the trial's summary)."""
    out: list[tuple[MetricReport | DettuiError, list[int]]] = []
    for i, r in enumerate(reports):
        if out and isinstance(r, MetricReport) and _joins(out[-1][0], r):
            last = out[-1][0]
            assert isinstance(last, MetricReport)
            out[-1] = (replace(last, metrics=last.metrics | r.metrics), out[-1][1] + [i])
        else:
            out.append((r, [i]))
    return out


def _joins(last: MetricReport | DettuiError, r: MetricReport) -> bool:
    return (isinstance(last, MetricReport) and r.group != "validation"
            and last.batch_metrics is None and r.batch_metrics is None
            and (last.run_id, last.group, last.steps) == (r.run_id, r.group, r.steps)
            and len(last.metrics) + len(r.metrics) <= metric_store.MAX_METRIC_KEYS
            and not last.metrics.keys() & r.metrics.keys())


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


B = TypeVar("B", bound=Message)


async def _own_report(request: web.Request, model: type[B]) -> tuple[int, B]:
    """The trial of the path, written only by its own allocation (or, detached, its owner),
    and the report's body."""
    trial_id = path_int(request, "id")
    await require_trial_writer(request, trial_id)
    return trial_id, await parse(request, model)


@task_route
@op(body=ProgressBody)
async def progress(request: web.Request) -> web.Response:
    trial_id, body = await _own_report(request, ProgressBody)
    if not 0 <= body.progress <= 1:
        raise InvalidArgument("progress: must be between 0 and 1")
    await request.app[appkeys.CLUSTER].dispatcher.run(reports.progress, trial_id, body.progress)
    return json_response({})


routes.post("/api/v1/trials/{id}/progress")(progress)


@task_route
@op(body=EarlyExitBody)
async def early_exit(request: web.Request) -> web.Response:
    trial_id, body = await _own_report(request, EarlyExitBody)
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
    trial_id, body = await _own_report(request, RunnerMetadataBody)
    await request.app[appkeys.CLUSTER].dispatcher.run(reports.runner_state, trial_id, body.state)
    return json_response({})


routes.post("/api/v1/trials/{id}/runner/metadata")(runner_metadata)
