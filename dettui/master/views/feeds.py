"""The push stream's topics and readers: what `GET /api/v1/stream` (`routes.stream`) sends.

Changes are signalled by the master's Notifier. Each topic has one reader however many clients
follow it (a `Feed`): it re-reads at once after a change (SETTLE), at most every COALESCE
seconds (AGENTS_SPACING for `agents`; PARTIAL_SPACING after a re-read of only the objects a
change named) or three times its last read's length (a burst becomes one or two diffs; a big
topic never takes more than a third of the master) and at least every IDLE_REREAD seconds,
computes the diff once and hands the same text to every subscriber; a notification that
names the ids that changed makes it re-read only those objects (experiments, and an
experiment's trials), on a reader of their own (`store.db.FEW`): never in line behind another
topic's whole read. A new subscriber gets its snapshot from the feed's
last read. Each connection sends from a queue of its own: a client that falls more than
MAX_BACKLOG messages behind is disconnected (it reconnects and gets fresh snapshots) rather
than holding up the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import WSCloseCode, web

from dettui.errors import DettuiError, InvalidArgument
from dettui.jsonfast import dumps_text as _encode  # each object compared, then sent
from dettui.master.http import appkeys, shapes
from dettui.master.store import db as store_db
from dettui.master.store import experiments as exp_store
from dettui.master.store.page import Page
from dettui.master.views import agents as agent_views
from dettui.master.views import experiments as exp_views
from dettui.master.views import jobs as job_views
from dettui.master.views.trials import trial_objects

log = logging.getLogger("dettui.master.stream")
COALESCE = 0.1  # seconds between two reads: a burst of changes becomes one or two diffs
# Seconds after a re-read of only the objects a change named (a few rows) before the next: a
# window that holds running experiments changes many times a second, and a change made there
# waited out the rest of COALESCE (50 ms on average, 100 at worst) for a read of 0.2 ms.
PARTIAL_SPACING = 0.02
SETTLE = 0.005  # seconds a first change waits for the others of the same moment
IDLE_REREAD = 10.0  # seconds: re-read even without a signal (a safety net, not the mechanism)
MAX_BACKLOG = 1000  # messages a connection may have waiting to be sent
# Every heartbeat changes its agent (telemetry, last heartbeat) and every trial that starts or
# ends its slots: 100 agents changed all the time, and a read sent all of them. Read at most
# twice a second (nvitop refreshes every two).
AGENTS_SPACING = 0.5

Objects = list[tuple[str, dict[str, Any]]]  # (key, object) in the topic's order


@dataclass(frozen=True)
class Topic:
    read: Callable[[], Awaitable[Objects]]
    signals: tuple[str, ...]  # Notifier topics that mean "this may have changed"
    # Objects ordered by their numeric key can be re-read in part: `read_some(keys)` gives
    # those of `keys` that exist, when `by_id`'s notifications name the keys that changed.
    read_some: Callable[[set[str]], Awaitable[Objects]] | None = None
    by_id: str | None = None
    # A window of a long list (`experiments?limit=N`, `jobs?limit=N`): the list's length at
    # the last read, sent with every message as `total`.
    total: Callable[[], int] | None = None
    # The newest `window` objects by numeric key, re-read in part: an object older than the
    # window is none of its business; a new one enters it (the oldest leave), read alone; a
    # deleted one moves it (a whole read). `grown(n)` tells `total` that n were added.
    window: int | None = None
    grown: Callable[[int], None] | None = None
    # Seconds at least between two reads (None: COALESCE).
    spacing: float | None = None


def _keyed(objs: list[dict[str, Any]], field: str) -> Objects:
    return [(str(o[field]), o) for o in objs]


MAX_WINDOW = 100_000  # objects a windowed topic may ask for


def _window(app: web.Application, name: str) -> Topic | None:
    """`experiments?limit=N` (the newest N experiments) or `jobs?limit=N` (the first N jobs
    in queue order): a page read with LIMIT. The jobs window is re-read whole on each change
    (a priority change reorders it); the experiments window only in the experiments that
    changed, while they are in it (O(changes), not O(N))."""
    base, _, query = name.partition("?limit=")
    if base not in ("experiments", "jobs") or not (query.isascii() and query.isdigit()) \
            or not 0 < int(query) <= MAX_WINDOW:
        return None
    want = Page(0, int(query), desc=base == "experiments")
    total = [0]

    async def read() -> Objects:
        if base == "jobs":
            jobs, window = await job_views.queue_page(app, want)
            total[0] = window.total
            return _keyed(jobs, "jobId")
        exps, window = await app[appkeys.DB].read(exp_store.listed_page, want)
        total[0] = window.total
        return _keyed([shapes.listed_experiment(e) for e in exps], "id")

    if base == "jobs":
        return Topic(read, ("jobs", "experiments"), total=lambda: total[0])

    async def some(ids: set[str]) -> Objects:
        wanted = [int(i) for i in ids if i.isdigit()]
        return _keyed(await exp_views.experiment_objects(app[appkeys.DB], wanted), "id")

    def grown(n: int) -> None:
        total[0] += n
    return Topic(read, ("experiments",), some, "experiments", total=lambda: total[0],
                 window=want.limit, grown=grown)


def topic(app: web.Application, name: str) -> Topic | None:
    """The topic called `name`, or None if there is no such topic."""
    db = app[appkeys.DB]
    if "?" in name:
        return _window(app, name)
    if name == "jobs":
        async def jobs() -> Objects:
            return _keyed(await job_views.queue_jobs(app), "jobId")
        return Topic(jobs, ("jobs", "experiments"))
    if name == "experiments":
        async def experiments() -> Objects:
            return _keyed(await exp_views.experiment_objects(db), "id")

        async def some(ids: set[str]) -> Objects:
            wanted = [int(i) for i in ids if i.isdigit()]
            return _keyed(await exp_views.experiment_objects(db, wanted), "id")
        return Topic(experiments, ("experiments",), some, "experiments")
    if name == "agents":
        async def agents() -> Objects:
            return _keyed(await agent_views.agent_objects(app), "id")
        return Topic(agents, ("agents", "jobs"), spacing=AGENTS_SPACING)
    prefix, _, ident = name.partition(":")
    if prefix == "experiment" and ident.isascii() and ident.isdigit():
        exp_id = int(ident)

        usage = app[appkeys.CLUSTER].agents.trial_usage.views  # running trials' resources

        async def trials() -> Objects:
            return _keyed(await trial_objects(db, exp_id, resources=usage), "id")

        async def some_trials(ids: set[str]) -> Objects:
            wanted = [int(i) for i in ids if i.isdigit()]
            return _keyed(await trial_objects(db, exp_id, wanted, usage), "id")
        return Topic(trials, (name,), some_trials, name)
    return None


class Feed:
    """One topic's reader, shared by every connection that follows it."""

    def __init__(self, app: web.Application, name: str, source: Topic) -> None:
        self.app = app
        self.name = name
        self.source = source
        self.subscribers: set[Connection] = set()
        self.texts: dict[str, str] | None = None  # key -> the object's JSON, as last sent
        self.order: list[str] = []
        self.sent_total: int | None = None
        self.task = asyncio.create_task(self._run(), name=f"dettui-feed-{name}")

    def join(self, conn: Connection) -> None:
        self.subscribers.add(conn)
        if self.texts is not None:  # else the first read sends it
            conn.send(self._snapshot())

    def leave(self, conn: Connection) -> None:
        self.subscribers.discard(conn)
        if not self.subscribers:
            self.app[FEEDS].pop(self.name, None)
            self.task.cancel()

    def _snapshot(self) -> str:
        assert self.texts is not None
        return _message(self.name, "snapshot", [self.texts[k] for k in self.order], [],
                        self.order, self._total())

    def _total(self) -> int | None:
        return self.source.total() if self.source.total is not None else None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        store_db.READ_LANE.set(store_db.FEEDS)  # this task's reads: the feeds' own reader
        with self.app[appkeys.NOTIFIER].watching(*self.source.signals) as changes:
            full = True
            spacing = COALESCE if self.source.spacing is None else self.source.spacing
            read_at = took = 0.0  # the last read: when it began, how long it took
            gap = spacing  # and the least time after it before the next
            while self.subscribers:
                seen = changes.take()  # from here on, any change means one more read
                some = None if full else self._partial(seen)
                reads = some is None or bool(some)  # else nothing of the topic's changed
                if reads:
                    read_at = loop.time()
                try:
                    if some is None:
                        self._apply_all(await self.source.read())
                    elif some:
                        assert self.source.read_some is not None
                        with store_db.lane(store_db.FEW):  # not behind another topic's read
                            found = await self.source.read_some(some)
                        if self.source.window is None:
                            self._apply_some(some, found)
                        elif self._vanished(some, found):
                            self._apply_all(await self.source.read())  # one left the list
                        else:
                            self._enter_window(some, found)
                except DettuiError as exc:
                    self._give_up(exc.message)
                    return
                except Exception as exc:  # noqa: BLE001 - a broken topic must not kill sockets
                    log.exception("stream topic %s failed", self.name)
                    self._give_up(f"internal error: {exc}")
                    return
                if reads:
                    took = loop.time() - read_at
                    gap = spacing if some is None else min(spacing, PARTIAL_SPACING)
                try:
                    await asyncio.wait_for(changes.wait(), IDLE_REREAD)
                    full = False
                except TimeoutError:
                    full = True
                # The first change after a quiet spell is read at once; within COALESCE of the
                # last read (PARTIAL_SPACING after a re-read of a few objects), the next waits
                # out the rest of it (a burst costs two reads). A read that took long spaces
                # the next by three times its length: a topic's reads take at most a third of
                # the master's time, however large it grows. Changes that concern none of the
                # topic's objects (outside a window) read nothing and hold nothing up.
                await asyncio.sleep(max(SETTLE, read_at + max(gap, 3 * took) - loop.time()))

    def _partial(self, seen: dict[str, set[str] | None]) -> set[str] | None:
        """The keys to re-read, or None when everything must be."""
        if self.source.read_some is None or self.texts is None:
            return None
        keys_: set[str] = set()
        for signal, ids in seen.items():
            if signal != self.source.by_id or ids is None:
                return None
            keys_ |= ids
        if self.source.window is not None:
            return self._in_window(keys_)
        return keys_

    def _in_window(self, keys_: set[str]) -> set[str] | None:
        """Of the changed keys, those to re-read: those in the window, and those newer than
        its newest (new objects: they enter it); None if the window may have moved otherwise
        (a key between its oldest and newest that it does not hold, or older while it is not
        full)."""
        assert self.texts is not None and self.source.window is not None
        inside = keys_ & self.texts.keys()
        outside = keys_ - inside
        if not outside:
            return inside
        if not all(k.isascii() and k.isdigit() for k in outside):
            return None
        full = len(self.texts) >= self.source.window
        numbers = [int(k) for k in self.texts]
        oldest, newest = min(numbers, default=0), max(numbers, default=0)
        newer = {k for k in outside if int(k) > newest}
        older = outside - newer
        if older and not (full and all(int(k) < oldest for k in older)):
            return None
        return inside | newer

    def _enter_window(self, wanted: set[str], objs: Objects) -> None:
        """Re-read objects of the window, and new ones (newer than all of it): they enter at
        its head and push its oldest out."""
        assert self.texts is not None and self.source.window is not None
        found = {k: _encode(o) for k, o in objs}
        added = [k for k in found if k not in self.texts]
        upsert = {k: text for k, text in found.items() if self.texts.get(k) != text}
        self.texts.update(found)
        remove: list[str] = []
        if added:
            if self.source.grown is not None:
                self.source.grown(len(added))
            keys_ = sorted(self.texts, key=int, reverse=True)
            remove = keys_[self.source.window:]
            for k in remove:
                del self.texts[k]
                upsert.pop(k, None)
            self.order = keys_[:self.source.window]
        if upsert or remove:
            ordered = [upsert[k] for k in self.order if k in upsert]
            self.sent_total = self._total()
            self._broadcast(_message(self.name, "diff", ordered, remove,
                                     self.order if added else None, self.sent_total))

    def _vanished(self, wanted: set[str], objs: Objects) -> bool:
        """Whether an object the window holds was not found by a partial read (deleted)."""
        assert self.texts is not None
        found = {k for k, _ in objs}
        return any(k in self.texts and k not in found for k in wanted)

    def _apply_all(self, objs: Objects) -> None:
        texts = {k: _encode(o) for k, o in objs}
        order = [k for k, _ in objs]
        if self.texts is None:
            self.texts, self.order = texts, order
            self.sent_total = self._total()
            self._broadcast(self._snapshot())
            return
        upsert = [texts[k] for k in order if self.texts.get(k) != texts[k]]
        remove = [k for k in self.texts if k not in texts]
        new_order = order if order != self.order else None
        self.texts, self.order = texts, order
        total = self._total()
        if upsert or remove or new_order is not None or total != self.sent_total:
            self.sent_total = total
            self._broadcast(_message(self.name, "diff", upsert, remove, new_order, total))

    def _apply_some(self, wanted: set[str], objs: Objects) -> None:
        assert self.texts is not None
        found = {k: _encode(o) for k, o in objs}
        upsert = [text for k, text in found.items() if self.texts.get(k) != text]
        remove = sorted((k for k in wanted if k not in found and k in self.texts), key=int)
        added = [k for k in found if k not in self.texts]
        self.texts.update(found)
        for k in remove:
            del self.texts[k]
        new_order = None
        if added or remove:
            self.order = new_order = sorted(self.texts, key=int)
        if upsert or remove:
            self._broadcast(_message(self.name, "diff", upsert, remove, new_order,
                                     self._total()))

    def _broadcast(self, text: str) -> None:
        for conn in list(self.subscribers):
            conn.send(text)

    def _give_up(self, message: str) -> None:
        body = _encode({"topic": self.name, "error": message})
        for conn in list(self.subscribers):
            conn.send(body)
            conn.topics.discard(self.name)
        self.subscribers.clear()
        self.app[FEEDS].pop(self.name, None)


class Connection:
    """One client's socket: the topics it follows and the queue of what it is sent."""

    def __init__(self, ws: web.WebSocketResponse, app: web.Application) -> None:
        self.ws = ws
        self.app = app
        self.topics: set[str] = set()
        self._outbox: asyncio.Queue[str] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name="dettui-stream-writer")

    def send(self, text: str) -> None:
        """Queue a message; a client too far behind is disconnected (it reconnects)."""
        if self._outbox.qsize() >= MAX_BACKLOG:
            if not self.ws.closed:
                log.warning("a stream client is %d messages behind; disconnecting it",
                            MAX_BACKLOG)
                asyncio.ensure_future(self.ws.close(code=WSCloseCode.TRY_AGAIN_LATER,
                                                    message=b"too far behind"))
            return
        self._outbox.put_nowait(text)

    async def _write(self) -> None:
        with contextlib.suppress(ConnectionError):  # the client went away mid-send
            while True:
                await self.ws.send_str(await self._outbox.get())

    async def error(self, message: str) -> None:
        self.send(_encode({"error": message}))

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
            self.drop(name)
            feeds = self.app[FEEDS]
            feed = feeds.get(name)
            if feed is None:
                found = topic(self.app, name)
                if found is None:
                    await self.error(f"unknown topic '{name}'")
                    continue
                feed = feeds[name] = Feed(self.app, name, found)
            self.topics.add(name)
            feed.join(self)

    def drop(self, name: str) -> None:
        if name in self.topics:
            self.topics.discard(name)
            feed = self.app[FEEDS].get(name)
            if feed is not None:
                feed.leave(self)

    async def close(self) -> None:
        for name in list(self.topics):
            self.drop(name)
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._writer


def _message(name: str, kind: str, upsert: list[str], remove: list[str],
             order: list[str] | None, total: int | None = None) -> str:
    """The message text, reusing the objects' JSON already encoded for comparing."""
    more = f',"total":{total}' if total is not None else ""
    return (f'{{"topic":{_encode(name)},"kind":"{kind}","upsert":[{",".join(upsert)}],'
            f'"remove":{_encode(remove)},"order":{_encode(order)}{more}}}')


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


STREAMS: web.AppKey[set[Connection]] = web.AppKey("streams")  # open push streams
FEEDS: web.AppKey[dict[str, Feed]] = web.AppKey("feeds")  # a shared reader per followed topic
