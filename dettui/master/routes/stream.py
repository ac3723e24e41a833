"""`GET /api/v1/stream`: a WebSocket push stream of changes (what the dashboard draws from).

Protocol (JSON text frames):

- client → server: `{"subscribe": [topic, ...]}`, `{"unsubscribe": [topic, ...]}` (one message
  may carry both; a single topic may be a bare string). Subscribing again to a topic already
  followed sends a fresh snapshot.
- topics and their objects, each exactly as the matching REST list shows it:
  `jobs` (job objects of GET /api/v1/job-queues-v2, every pool; key `jobId`, queue order),
  `experiments` (GET /api/v1/experiments incl. archived, with `omitConfig=true`: no `config`
  or `originalConfig`; key `id` as a string, by id),
  `agents` (GET /api/v1/agents with telemetry; key `id`, by id),
  `experiment:<id>` (GET /api/v1/experiments/<id>/trials; key trial `id` as a string, by id);
  windows of the long lists: `experiments?limit=N` (the newest N, by id descending) and
  `jobs?limit=N` (the first N in queue order), whose messages also carry `total` (the whole
  list's length).
- server → client, per topic: first
  `{"topic", "kind": "snapshot", "upsert": [every object], "remove": [], "order": [keys]}`,
  then after each change `{"topic", "kind": "diff", "upsert": [new or changed objects only],
  "remove": [keys gone], "order": [every key] | null}`; `order` is null when the key sequence
  is unchanged, else the full new sequence (also on additions and removals).
- errors: `{"error": "unknown topic 'x'"}`, `{"error": "malformed message: ..."}`, and
  `{"topic", "error"}` when a topic cannot be read (e.g. no such experiment; it is dropped,
  subscribe again later). None of them closes the socket.

The topics, their shared readers (`Feed`) and the connections are `views.feeds`.
"""

from __future__ import annotations

import contextlib

from aiohttp import WSCloseCode, WSMsgType, web

from dettui.errors import InvalidArgument
from dettui.master.http.middleware import require_user
from dettui.master.http.openapi import op
from dettui.master.views import feeds

routes = web.RouteTableDef()
MAX_MESSAGE = 64 * 1024  # bytes a client message may have


@routes.get("/api/v1/stream")
@op(query={"token": str})
async def stream(request: web.Request) -> web.WebSocketResponse:
    require_user(request)
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=MAX_MESSAGE)
    if not ws.can_prepare(request).ok:
        raise InvalidArgument("/api/v1/stream is a WebSocket: connect with a WebSocket client")
    await ws.prepare(request)
    conn = feeds.Connection(ws, request.app)
    request.app[feeds.STREAMS].add(conn)
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await conn.receive(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await conn.error("malformed message: send JSON in text frames")
    except ConnectionError:
        pass  # the client went away mid-send
    finally:
        request.app[feeds.STREAMS].discard(conn)
        await conn.close()
    return ws


async def close_all(app: web.Application) -> None:
    """On shutdown: end every push stream, so no topic reads a closing store."""
    open_streams = app[feeds.STREAMS]
    for conn in list(open_streams):
        with contextlib.suppress(Exception):
            await conn.ws.close(code=WSCloseCode.GOING_AWAY, message=b"master shutting down")


def setup(app: web.Application) -> None:
    app[feeds.STREAMS] = set()
    app[feeds.FEEDS] = {}
    app.on_shutdown.append(close_all)
    app.router.add_routes(routes)
