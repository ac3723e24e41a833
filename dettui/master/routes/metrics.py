"""Determined's metric streams for the SDK (`trial.iter_metrics`, `stream_training_metrics`):
NDJSON, one result holding every report of the trials, each a v1MetricsReport."""

from __future__ import annotations

from aiohttp import web

from dettui.master import offload
from dettui.master.http import appkeys, shapes
from dettui.master.http.middleware import check_trial
from dettui.master.http.openapi import op
from dettui.master.http.wire import STREAM_CHUNK, json_bytes, parse_id
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Metric

routes = web.RouteTableDef()
STREAM_QUERY = {"trialIds": list[int]}


async def _stream(request: web.Request, group: str | None) -> web.StreamResponse:
    ids = [parse_id(x, "trialIds") for x in request.query.getall("trialIds", [])]
    db = request.app[appkeys.DB]
    for trial_id in ids:
        check_trial(request, trial_id)
        await db.read(trial_store.get, trial_id)
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    # One result line per piece of at most STREAM_CHUNK reports (the SDK iterates over the
    # lines and their metrics), so a million reports are never held whole.
    lines = 0
    for trial_id in ids:
        key: tuple[int, int] | None = None
        index = 0
        while True:
            rows, key = await db.read(metric_store.chunk, trial_id, group, key=key,
                                     limit=STREAM_CHUNK)
            if rows:
                await resp.write(await offload.cpu(_ndjson_line, rows, index))
                index += len(rows)
                lines += 1
            if len(rows) < STREAM_CHUNK:
                break
    if not lines:
        await resp.write(b'{"result": {"metrics": []}}\n')
    await resp.write_eof()
    return resp


def _ndjson_line(rows: list[Metric], index: int) -> bytes:
    out = [shapes.metrics_report(m, index + i) for i, m in enumerate(rows)]
    return json_bytes({"result": {"metrics": out}}) + b"\n"


@routes.get("/api/v1/trials/metrics/trial_metrics")
@op(query={**STREAM_QUERY, "group": str})
async def trial_metrics(request: web.Request) -> web.StreamResponse:
    """Determined's GetMetrics: every report of a group (all groups without one)."""
    return await _stream(request, request.query.get("group") or None)


@routes.get("/api/v1/trials/metrics/training_metrics")
@op(query=STREAM_QUERY)
async def training_metrics(request: web.Request) -> web.StreamResponse:
    return await _stream(request, "training")


@routes.get("/api/v1/trials/metrics/validation_metrics")
@op(query=STREAM_QUERY)
async def validation_metrics(request: web.Request) -> web.StreamResponse:
    return await _stream(request, "validation")
