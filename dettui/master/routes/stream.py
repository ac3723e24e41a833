"""`GET /api/v1/stream`: a WebSocket push stream of changes (what the dashboard draws from).

Protocol (JSON text frames):

- client → server: `{"subscribe": [topic, ...]}`, `{"unsubscribe": [topic, ...]}` (one message
  may carry both; a single topic may be a bare string). Subscribing again to a topic already
  followed sends a fresh snapshot.
- topics and their objects, each exactly as the matching REST list shows it:
  `jobs` (job objects of GET /api/v1/job-queues-v2, every pool; key `jobId`, queue order),
  `experiments` (GET /api/v1/experiments incl. archived; key `id` as a string, by id),
  `agents` (GET /api/v1/agents with telemetry; key `id`, by id),
  `experiment:<id>` (GET /api/v1/experiments/<id>/trials; key trial `id` as a string, by id).
- server → client, per topic: first
  `{"topic", "kind": "snapshot", "upsert": [every object], "remove": [], "order": [keys]}`,
  then after each change `{"topic", "kind": "diff", "upsert": [new or changed objects only],
  "remove": [keys gone], "order": [every key] | null}`; `order` is null when the key sequence
  is unchanged, else the full new sequence (also on additions and removals).
- errors: `{"error": "unknown topic 'x'"}`, `{"error": "malformed message: ..."}`, and
  `{"topic", "error"}` when a topic cannot be read (e.g. no such experiment; it is dropped,
  subscribe again later). None of them closes the socket.

Changes are signalled by the master's Notifier; a topic re-reads at most every COALESCE
seconds (a burst becomes one diff) and at least every IDLE_REREAD seconds. Per connection and
topic the server keeps a hash of each object last sent, not the objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from dettui.errors import DettuiError, InvalidArgument
from dettui.master import keys
from dettui.master.middleware import require_user
from dettui.master.openapi import op
from dettui.master.routes import agents as agent_routes
from dettui.master.routes import experiments as exp_routes
from dettui.master.routes import jobs as job_routes

log = logging.getLogger("dettui.master.stream")
routes = web.RouteTableDef()
COALESCE = 0.1  # seconds after a signal before re-reading; also the shortest gap between reads
IDLE_REREAD = 10.0  # seconds: re-read even without a signal (a safety net, not the mechanism)
MAX_MESSAGE = 64 * 1024  # bytes a client message may have

Objects = list[tuple[str, dict[str, Any]]]  # (key, object) in the topic's order


@dataclass(frozen=True)
class Topic:
    read: Callable[[], Awaitable[Objects]]
    signals: tuple[str, ...]  # Notifier topics that mean "this may have changed"


def _keyed(objs: list[dict[str, Any]], field: str) -> Objects:
    return [(str(o[field]), o) for o in objs]


def topic(app: web.Application, name: str) -> Topic | None:
    """The topic called `name`, or None if there is no such topic."""
    db = app[keys.DB]
    if name == "jobs":
        async def jobs() -> Objects:
            return _keyed(await job_routes.queue_jobs(app), "jobId")
        return Topic(jobs, ("jobs", "experiments"))
    if name == "experiments":
        async def experiments() -> Objects:
            return _keyed(await exp_routes.experiment_objects(db), "id")
        return Topic(experiments, ("experiments",))
    if name == "agents":
        async def agents() -> Objects:
            return _keyed(await agent_routes.agent_objects(app), "id")
        return Topic(agents, ("agents", "jobs"))
    prefix, _, ident = name.partition(":")
    if prefix == "experiment" and ident.isascii() and ident.isdigit():
        exp_id = int(ident)

        async def trials() -> Objects:
            return _keyed(await exp_routes.trial_objects(db, exp_id), "id")
        return Topic(trials, (f"experiment:{exp_id}",))
    return None


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class Connection:
    """One client's socket: its subscriptions, each followed by a task of its own."""

    def __init__(self, ws: web.WebSocketResponse, app: web.Application) -> None:
        self.ws = ws
        self.app = app
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._send_lock = asyncio.Lock()  # topics send concurrently; frames must not interleave

    async def send(self, text: str) -> None:
        async with self._send_lock:
            await self.ws.send_str(text)

    async def error(self, message: str, topic_name: str | None = None) -> None:
        body = {"topic": topic_name, "error": message} if topic_name else {"error": message}
        await self.send(_encode(body))

    async def receive(self, data: str) -> None:
        """Act on one client message; anything wrong with it is answered, never raised."""
        try:
            wanted = _request(data)
        except InvalidArgument as exc:
            await self.error(f"malformed message: {exc.message}")
            return
        for name in wanted.get("unsubscribe", []):
            self.drop(name)
        for name in wanted.get("subscribe", []):
            found = topic(self.app, name)
            if found is None:
                await self.error(f"unknown topic '{name}'")
                continue
            self.drop(name)
            self.tasks[name] = asyncio.create_task(self._follow(name, found),
                                                   name=f"dettui-stream-{name}")

    def drop(self, name: str) -> None:
        task = self.tasks.pop(name, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _follow(self, name: str, source: Topic) -> None:
        with contextlib.suppress(ConnectionError):  # the client went away mid-send
            await self._follow_changes(name, source)

    async def _follow_changes(self, name: str, source: Topic) -> None:
        with self.app[keys.NOTIFIER].watching(*source.signals) as changed:
            sent: dict[str, int] | None = None  # key -> hash of the object last sent
            order: list[str] = []
            while not self.ws.closed:
                changed.clear()  # from here on, any change means one more read
                try:
                    objs = await source.read()
                except DettuiError as exc:
                    await self._give_up(name, exc.message)
                    return
                except Exception as exc:  # noqa: BLE001 - a broken topic must not kill the socket
                    log.exception("stream topic %s failed", name)
                    await self._give_up(name, f"internal error: {exc}")
                    return
                sent, order = await self._publish(name, objs, sent, order)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), IDLE_REREAD)
                await asyncio.sleep(COALESCE)

    async def _give_up(self, name: str, message: str) -> None:
        if self.tasks.get(name) is asyncio.current_task():
            del self.tasks[name]
        await self.error(message, name)

    async def _publish(self, name: str, objs: Objects, sent: dict[str, int] | None,
                       order: list[str]) -> tuple[dict[str, int], list[str]]:
        """Send a snapshot (nothing sent yet) or the diff against what was sent."""
        texts = [(k, _encode(o)) for k, o in objs]
        now = {k: hash(text) for k, text in texts}
        keys_now = [k for k, _ in texts]
        if sent is None:
            await self.send(_message(name, "snapshot", [t for _, t in texts], [], keys_now))
            return now, keys_now
        upsert = [text for k, text in texts if sent.get(k) != now[k]]
        remove = [k for k in sent if k not in now]
        new_order = keys_now if keys_now != order else None
        if upsert or remove or new_order is not None:
            await self.send(_message(name, "diff", upsert, remove, new_order))
        return now, keys_now


def _message(name: str, kind: str, upsert: list[str], remove: list[str],
             order: list[str] | None) -> str:
    """The message text, reusing the objects' JSON already encoded for hashing."""
    return (f'{{"topic":{_encode(name)},"kind":"{kind}","upsert":[{",".join(upsert)}],'
            f'"remove":{_encode(remove)},"order":{_encode(order)}}}')


def _request(data: str) -> dict[str, list[str]]:
    """A client message as {"subscribe": [...], "unsubscribe": [...]}."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise InvalidArgument(f"not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise InvalidArgument('expected an object such as {"subscribe": ["jobs"]}')
    out: dict[str, list[str]] = {}
    for field in ("subscribe", "unsubscribe"):
        value = body.get(field)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise InvalidArgument(f"{field}: expected a list of topic names")
        out[field] = list(dict.fromkeys(value))
    if not out:
        raise InvalidArgument('expected "subscribe" or "unsubscribe"')
    return out


@routes.get("/api/v1/stream")
@op(query={"token": str})
async def stream(request: web.Request) -> web.WebSocketResponse:
    require_user(request)
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=MAX_MESSAGE)
    if not ws.can_prepare(request).ok:
        raise InvalidArgument("/api/v1/stream is a WebSocket: connect with a WebSocket client")
    await ws.prepare(request)
    conn = Connection(ws, request.app)
    request.app[keys.STREAMS].add(conn)
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await conn.receive(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await conn.error("malformed message: send JSON in text frames")
    except ConnectionError:
        pass  # the client went away mid-send
    finally:
        request.app[keys.STREAMS].discard(conn)
        await conn.close()
    return ws


async def close_all(app: web.Application) -> None:
    """On shutdown: end every push stream, so no topic reads a closing store."""
    open_streams = app[keys.STREAMS]
    for conn in list(open_streams):
        with contextlib.suppress(Exception):
            await conn.ws.close(code=WSCloseCode.GOING_AWAY, message=b"master shutting down")


def setup(app: web.Application) -> None:
    app[keys.STREAMS] = set()
    app.on_shutdown.append(close_all)
    app.router.add_routes(routes)
