"""The master about itself: its effective config (`det master config`), its own log lines
(`det master logs`, support bundles), the cluster-wide message, config policies and resource
pools' workspace bindings (dettui has none of either: it answers as a Determined master with
none set, and says setting them is not supported)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence

from aiohttp import web

from dettui.errors import InvalidArgument, NotFound, Unimplemented
from dettui.master.http import appkeys
from dettui.master.http.middleware import require_admin, require_user
from dettui.master.http.openapi import op
from dettui.master.http.wire import json_response, paginate, query_int, ts
from dettui.master.master_log import Entry
from dettui.master.views.master_config import effective

routes = web.RouteTableDef()
FOLLOW_WAIT = 5.0  # seconds between looks at a follower's connection while the log is quiet
CHUNK = 256  # lines encoded and written at a time; the loop serves other requests in between
WORKLOAD_TYPES = ("EXPERIMENT", "NTSC")


@routes.get("/api/v1/master/config")
async def master_config(request: web.Request) -> web.Response:
    """Admins only, as Determined's basic authorization."""
    require_admin(request)
    return json_response({"config": effective(request.app[appkeys.SETTINGS],
                                              request.app[appkeys.CLUSTER_ID])})


def _entry_json(e: Entry) -> str:
    return json.dumps({"result": {"logEntry": {
        "id": e.id, "message": e.message, "timestamp": ts(e.time), "level": e.level}}},
        ensure_ascii=False) + "\n"


async def _write(resp: web.StreamResponse, lines: Sequence[Entry]) -> None:
    """`lines` as NDJSON, CHUNK lines at a time, yielding to the loop after each: an answer of
    the whole ring (some MB) does not hold up the master's other requests while it is built."""
    for start in range(0, len(lines), CHUNK):
        await resp.write("".join(_entry_json(e) for e in lines[start:start + CHUNK]).encode())
        await asyncio.sleep(0)


@routes.get("/api/v1/master/logs")
@op(query={"offset": int, "limit": int, "follow": bool}, long_poll="follow")
async def master_logs(request: web.Request) -> web.StreamResponse:
    """The master's lines since it started (the last 25,000, of at most 4 million characters
    in all: `master_log`), NDJSON, streamed in chunks; `offset` < 0 counts from the end (`det
    master logs --tail N`), `limit` > 0 caps the lines; `follow` (`-f`) keeps the stream open
    for new lines."""
    require_user(request)
    offset = query_int(request, "offset", 0)
    limit = query_int(request, "limit", 0)
    follow = request.query.get("follow", "false").lower() == "true"
    if limit < 0:
        raise InvalidArgument("limit: must be >= 0")
    if follow and limit:
        raise InvalidArgument("limit is required to be 0 when follow is true")
    buffer = request.app[appkeys.MASTER_LOG]
    lines = buffer.entries(offset)
    if limit:
        lines = lines[:limit]
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    with contextlib.suppress(ConnectionResetError):  # the reader may leave at any line
        await _write(resp, lines)
        last = lines[-1].id if lines else buffer.last_id()
        while follow and request.transport is not None and not request.transport.is_closing():
            await buffer.wait_after(last, FOLLOW_WAIT)
            newer = buffer.after(last)
            if newer:
                await _write(resp, newer)
                last = newer[-1].id
        await resp.write_eof()
    return resp


@routes.get("/api/v1/master/cluster_message")
async def cluster_message(request: web.Request) -> web.Response:
    """No cluster-wide message is ever set on dettui (admins only, as Determined)."""
    require_admin(request)
    return json_response({"clusterMessage": None})


@routes.delete("/api/v1/master/cluster_message")
async def clear_cluster_message(request: web.Request) -> web.Response:
    require_admin(request)
    return json_response({})  # there is none to clear


def _workload_type(request: web.Request) -> str:
    kind = request.match_info["workloadType"]
    if kind not in WORKLOAD_TYPES:
        raise InvalidArgument(f"invalid workload type: {kind[:40]!r} (expected EXPERIMENT or "
                              "NTSC)")
    return kind


@routes.get("/api/v1/config-policies/global/{workloadType}")
async def global_config_policies(request: web.Request) -> web.Response:
    """No config policies are set on dettui (an Enterprise feature of Determined)."""
    require_user(request)
    _workload_type(request)
    return json_response({"configPolicies": {}})


@routes.put("/api/v1/config-policies/global/{workloadType}")
@op(body=dict)
async def set_global_config_policies(request: web.Request) -> web.Response:
    require_admin(request)
    _workload_type(request)
    raise Unimplemented("config policies are not supported by dettui: set resources and "
                        "limits in each experiment's config")


@routes.delete("/api/v1/config-policies/global/{workloadType}")
async def delete_global_config_policies(request: web.Request) -> web.Response:
    """Admins only, as Determined; none is ever set, so there is nothing to delete."""
    require_admin(request)
    _workload_type(request)
    return json_response({})


def _pool(request: web.Request) -> str:
    name = request.match_info["name"]
    settings = request.app[appkeys.SETTINGS]
    known = set(settings.pools) | set(settings.slurm) | \
        request.app[appkeys.CLUSTER].agents.pools()
    if name not in known:
        raise NotFound(f"resource pool {name[:80]!r} not found")
    return name


@routes.get("/api/v1/resource-pools/{name}/workspace-bindings")
@op(paged=True)
async def workspace_bindings(request: web.Request) -> web.Response:
    """No workspace is bound to any pool: dettui has one project, and every pool serves it."""
    require_user(request)
    _pool(request)
    ids, pagination = paginate([], request)
    return json_response({"workspaceIds": ids, "pagination": pagination})


async def _bind(request: web.Request) -> web.Response:
    """`det rp bindings add|remove|replace`: admins only, as Determined; dettui binds no
    workspace to a pool."""
    require_admin(request)
    _pool(request)
    raise Unimplemented("binding resource pools to workspaces is not supported by dettui: "
                        "every pool serves its one workspace; choose a pool with "
                        "resources.resource_pool in the experiment's config")


for _method in ("POST", "PUT", "DELETE"):
    routes.route(_method, "/api/v1/resource-pools/{name}/workspace-bindings")(_bind)
