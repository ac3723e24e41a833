"""Logs. Reading: a trial's (`det trial logs`) and a task's (`det task logs`), NDJSON, with
Determined's filters (ranks, agents, containers, sources, stdtypes, levels, time, text), head,
tail and follow, and dettui's id cursors `idBefore` / `idAfter` (a page of a long log before or
after the lines a reader holds: no two lines share an id, many share a timestamp). Writing: the
lines a task ships (its allocation's token), and those of Determined's detached log shipper
(`POST /task-logs`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dettui.errors import InvalidArgument
from dettui.master import offload
from dettui.master.http import appkeys, shapes
from dettui.master.http.body import read_json
from dettui.master.http.middleware import check_trial, require_trial_writer, task_route
from dettui.master.http.openapi import op
from dettui.master.http.requests import TaskLogsBody, parse
from dettui.master.http.wire import json_response, parse_id, parse_ts, path_int, query_int
from dettui.master.store import logs as log_store
from dettui.master.store import trials as trial_store

routes = web.RouteTableDef()
LOG_BATCH = 1000
LOG_QUERY = {"rankIds": list[int], "agentIds": list[str], "containerIds": list[str],
             "sources": list[str], "stdtypes": list[str], "levels": list[str],
             "searchText": str, "timestampBefore": str, "timestampAfter": str, "limit": int,
             "follow": bool, "orderBy": str, "idBefore": int, "idAfter": int}
FOLLOW_GRACE = 0.3  # seconds to wait for last lines after a trial ends
Serializer = Callable[[Any], dict[str, Any]]


def _filter(request: web.Request) -> log_store.LogFilter:
    q = request.query
    ranks = tuple(parse_id(r, "rankIds") for r in q.getall("rankIds", []))
    levels = tuple(lv.removeprefix("LOG_LEVEL_") for lv in q.getall("levels", []))
    return log_store.LogFilter(
        rank_ids=ranks, stdtypes=tuple(q.getall("stdtypes", [])), levels=levels,
        agent_ids=tuple(q.getall("agentIds", [])),
        container_ids=tuple(q.getall("containerIds", [])), sources=tuple(q.getall("sources", [])),
        search_text=q.get("searchText") or None,
        timestamp_before=parse_ts(q.get("timestampBefore")),
        timestamp_after=parse_ts(q.get("timestampAfter")),
    )


@routes.get("/api/v1/trials/{id}/logs")
@op(query=LOG_QUERY, long_poll="follow")
async def trial_logs(request: web.Request) -> web.StreamResponse:
    trial_id = path_int(request, "id")
    await request.app[appkeys.DB].read(trial_store.get, trial_id)
    return await _stream(request, trial_id, shapes.log_line)


@routes.get("/api/v1/tasks/{taskId}/logs")
@op(query=LOG_QUERY, long_poll="follow")
async def task_logs(request: web.Request) -> web.StreamResponse:
    """`det task logs TASK_ID`: a trial's task, as Determined's v1TaskLogsResponse."""
    trial = await request.app[appkeys.DB].read(trial_store.by_task_id, request.match_info["taskId"])
    check_trial(request, trial.id)
    return await _stream(request, trial.id, shapes.task_log_line)


async def _stream(request: web.Request, trial_id: int,
                  line_json: Serializer) -> web.StreamResponse:
    flt = _filter(request)
    limit = query_int(request, "limit", 0)
    cursor = Cursor(max(query_int(request, "idAfter", 0), 0),
                    max(query_int(request, "idBefore", 0), 0))
    follow = request.query.get("follow", "false").lower() == "true"
    descending = request.query.get("orderBy") == "ORDER_BY_DESC"
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    # The reader may leave at any line (Ctrl-C on `t logs -f`): the stream just ends.
    with contextlib.suppress(ConnectionResetError):
        await _lines(request, resp, trial_id, flt, line_json, limit, follow, descending,
                     cursor)
    return resp


async def _lines(request: web.Request, resp: web.StreamResponse, trial_id: int,
                 flt: log_store.LogFilter, line_json: Serializer, limit: int, follow: bool,
                 descending: bool, cursor: Cursor) -> None:
    """Write the lines asked for to `resp`, following the trial's new ones while `follow`
    (those after the last written; with `idBefore`, there are none to follow)."""
    if descending:
        last = await _drain_newest(request, resp, trial_id, flt, line_json, cursor, limit)
    else:
        last = await _drain(request, resp, trial_id, flt, line_json, cursor.after, limit,
                            cursor.before)
    follow = follow and not cursor.before
    if follow:
        await _follow(request, resp, trial_id, flt, line_json, last)
    await resp.write_eof()


async def _write(resp: web.StreamResponse, lines: list[Any], line_json: Serializer) -> None:
    """A page of lines as NDJSON, encoded off the loop (a page of long lines is megabytes)."""
    if lines:
        await resp.write(await offload.cpu(_encode, lines, line_json))


def _encode(lines: list[Any], line_json: Serializer) -> bytes:
    return "".join(json.dumps({"result": line_json(ln)}) + "\n" for ln in lines).encode()


async def _drain_newest(request: web.Request, resp: web.StreamResponse, trial_id: int,
                        flt: log_store.LogFilter, line_json: Serializer, cursor: Cursor,
                        limit: int) -> int:
    """The lines newest first, LOG_BATCH a read, each page written before the next is read
    (as `_drain`): the newest id written (to follow from), or `cursor.after` if none."""
    db = request.app[appkeys.DB]
    sent, before, newest = 0, cursor.before, cursor.after
    while True:
        batch = LOG_BATCH if limit <= 0 else min(LOG_BATCH, limit - sent)
        if batch <= 0:
            return newest
        lines = await db.read(log_store.fetch, trial_id, flt, limit=batch, descending=True,
                              after_id=cursor.after, before_id=before)
        await _write(resp, lines, line_json)
        if not lines:
            return newest
        newest = max(newest, lines[0].id)
        before = lines[-1].id
        sent += len(lines)


async def _drain(request: web.Request, resp: web.StreamResponse, trial_id: int,
                 flt: log_store.LogFilter, line_json: Serializer, after: int,
                 limit: int = 0, before: int = 0) -> int:
    db = request.app[appkeys.DB]
    sent = 0
    while True:
        batch = LOG_BATCH if limit <= 0 else min(LOG_BATCH, limit - sent)
        if batch <= 0:
            return after
        lines = await db.read(log_store.fetch, trial_id, flt, after_id=after, limit=batch,
                              before_id=before)
        await _write(resp, lines, line_json)
        if not lines:
            return after
        after = lines[-1].id
        sent += len(lines)


async def _follow(request: web.Request, resp: web.StreamResponse, trial_id: int,
                  flt: log_store.LogFilter, line_json: Serializer, last: int) -> None:
    db = request.app[appkeys.DB]
    notifier = request.app[appkeys.NOTIFIER]
    while not _gone(request):
        last = await _drain(request, resp, trial_id, flt, line_json, last)
        trial = await db.read(trial_store.get, trial_id)
        if trial.state.is_terminal():
            await asyncio.sleep(FOLLOW_GRACE)
            await _drain(request, resp, trial_id, flt, line_json, last)
            return
        await notifier.wait(f"logs:{trial_id}", 1.0)


@dataclass(frozen=True)
class Cursor:
    """Ids the lines read lie between (0: no bound)."""

    after: int = 0
    before: int = 0


def _gone(request: web.Request) -> bool:
    """Whether the reader has closed its connection (a quiet trial writes nothing to notice)."""
    return request.transport is None or request.transport.is_closing()


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
                     "level": _level(line.level),
                     "timestamp": parse_ts(line.timestamp) or time.time(), "log": line.log})
    await request.app[appkeys.CLUSTER].dispatcher.run(log_store.insert, rows)
    return json_response({})


routes.post("/api/v1/task/logs")(post_task_logs)


def _level(name: str | None) -> str | None:
    """A line's stored level: Determined's name (`TaskLogLine` let only those in) without
    its prefix, none for LOG_LEVEL_UNSPECIFIED."""
    level = (name or "").removeprefix("LOG_LEVEL_")
    return None if level in ("", "UNSPECIFIED") else level


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
