"""`det resources allocations|aggregated`: slot usage from the allocation history, CSV (or
JSON under /api/v1), in Determined's columns. Every user may read it, as in Determined."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, date, datetime

from aiohttp import web

from dettui import csv_cells
from dettui.errors import InvalidArgument
from dettui.master import usage
from dettui.master.http import appkeys
from dettui.master.http.middleware import require_user
from dettui.master.http.openapi import op
from dettui.master.http.wire import json_response
from dettui.master.store import usage as usage_store

routes = web.RouteTableDef()
RANGE = {"timestamp_after": str, "timestamp_before": str}
DATES = {"start_date": str, "end_date": str, "period": str}


def _csv(header: list[str], rows: list[list[str]]) -> web.Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(csv_cells.row(header))
    writer.writerows(csv_cells.row(r) for r in rows)
    return web.Response(text=out.getvalue(), content_type="text/csv")


def _time(request: web.Request, name: str) -> float:
    raw = request.query.get(name, "")
    try:
        when = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        what = "start" if name == "timestamp_after" else "end"
        raise InvalidArgument(f"invalid {what} time {raw[:40]!r}: expected "
                              "YYYY-MM-DDTHH:MM:SSZ") from None
    return when.timestamp()


@routes.get("/resources/allocation/allocations-csv")
@op(query=RANGE)
async def allocations_csv(request: web.Request) -> web.Response:
    require_user(request)
    start, end = _time(request, "timestamp_after"), _time(request, "timestamp_before")
    if start > end:
        raise InvalidArgument("start time cannot be after end time")
    uses = await request.app[appkeys.DB].read(usage_store.between, start, end)
    return _csv(usage.ALLOCATION_HEADER, usage.allocation_rows(uses, start, end, time.time()))


def _dates(request: web.Request) -> tuple[date, date, bool]:
    period = request.query.get("period", "")
    if period not in (usage.DAILY, usage.MONTHLY):
        raise InvalidArgument("no aggregation period specified")
    monthly = period == usage.MONTHLY
    form = "%Y-%m" if monthly else "%Y-%m-%d"
    found = []
    for name in ("start_date", "end_date"):
        raw = request.query.get(name, "")
        try:
            found.append(datetime.strptime(raw, form).date())
        except ValueError:
            raise InvalidArgument(f"invalid {name.replace('_', ' ')} {raw[:40]!r}") from None
    if found[0] > found[1]:
        raise InvalidArgument("start date cannot be after end date")
    return found[0], found[1], monthly


async def _aggregated(request: web.Request) -> list[dict[str, object]]:
    require_user(request)
    first, last, monthly = _dates(request)
    start = datetime(first.year, first.month, 1 if monthly else first.day, tzinfo=UTC)
    stop = datetime(last.year, last.month, last.day, tzinfo=UTC).timestamp() + 32 * 86400
    uses = await request.app[appkeys.DB].read(usage_store.between, start.timestamp(), stop)
    return usage.aggregated(uses, first, last, monthly, time.time())


@routes.get("/resources/allocation/aggregated")
@op(query=DATES)
async def aggregated_csv(request: web.Request) -> web.Response:
    return _csv(usage.AGGREGATED_HEADER, usage.aggregated_rows(await _aggregated(request)))


@routes.get("/api/v1/resources/allocation/aggregated")
@op(query=DATES)
async def aggregated_json(request: web.Request) -> web.Response:
    return json_response({"resourceEntries": await _aggregated(request)})
