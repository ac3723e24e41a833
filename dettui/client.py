"""Typed async REST client for the master (used by the CLI, the agent and the dashboard).

Errors come back as the same DettuiError classes the master raised.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dettui import errors, jsonfast, plainhttp, retry

if TYPE_CHECKING:  # imported where an agent call needs it: pydantic is a fifth of a CLI start
    import aiohttp  # imported where a session starts: a fifth of a CLI command's start too

    from dettui import protocol

DEFAULT_MASTER = "http://127.0.0.1:8080"
PAGE_SIZE = 2000  # items per request when a list is read page by page (each page of the job
# queue orders the whole queue again: 10,000 jobs in pages of 500 took 20 such reads)
PAGES_AT_ONCE = 4  # pages of a list asked at the same time, after the first


def master_url(explicit: str | None = None) -> str:
    """-m/--master, else DET_MASTER, else the local default, as Determined reads it: without a
    scheme, http:// and port 8080 (`-m 10.0.0.5` is http://10.0.0.5:8080); a bare port is
    this host's (`-m 18499` is http://127.0.0.1:18499); with a scheme and no port, the
    scheme's own (80, 443). InvalidArgument for what is not a master URL."""
    given = explicit or os.environ.get("DET_MASTER") or DEFAULT_MASTER
    url = given.strip()
    if url.removeprefix(":").isdigit():
        url = f"127.0.0.1:{url.removeprefix(':')}"
    if "://" not in url:
        url = "http://" + url
        default_port = 8080
    else:
        default_port = None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or default_port
    except ValueError as exc:
        raise errors.InvalidArgument(f"not a master URL: {given[:200]!r} ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username \
            or parts.password or parts.query or parts.fragment:
        raise errors.InvalidArgument(
            f"not a master URL: {given[:200]!r} (expected http://HOST:PORT, HOST:PORT, HOST or "
            "PORT)")
    host = parts.netloc.rpartition("@")[2]
    if port is not None and parts.port is None:
        host = f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/")


def _handshake_message(exc: aiohttp.WSServerHandshakeError) -> str:
    if exc.status == 401:
        return "invalid credentials: log in first (dettui user login)"
    return f"the master refused the stream: HTTP {exc.status} {exc.message}"


async def _chunks(
    data: bytes, progress: Callable[[int, int], None], size: int = 256 * 1024
) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]
        progress(min(start + size, len(data)), len(data))


@dataclass(frozen=True)
class GcPolicy:
    """How many checkpoints an experiment keeps: its best, each trial's best and latest."""

    experiment_best: int
    trial_best: int
    trial_latest: int


Params = dict[str, str] | list[tuple[str, str]]  # query parameters (a list may repeat a key)


def _window(body: dict[str, Any]) -> tuple[int | None, int | None]:
    """A page's endIndex and the whole list's total (None when the answer does not say)."""
    page = body.get("pagination")
    page = page if isinstance(page, dict) else {}
    end, total = page.get("endIndex"), page.get("total")
    return (end if isinstance(end, int) else None, total if isinstance(total, int) else None)


def _pairs(params: Params | None) -> list[tuple[str, str]]:
    return list(params.items()) if isinstance(params, dict) else list(params or [])


def _checkpoint_params(newest_first: bool, sort_by: str | None,
                       states: tuple[str, ...]) -> list[tuple[str, str]]:
    params = [("sortByAttr", sort_by)] if sort_by else [
        ("orderBy", "ORDER_BY_DESC" if newest_first else "ORDER_BY_ASC")]
    return params + [("states", s) for s in states]


class Client:
    """One session against one master. Use as `async with Client(url, token) as c:`.

    `plain`: calls that send a body and read one answer go over the standard library's HTTP
    on threads (`plainhttp`), for one-shot commands: no aiohttp import. Streams, downloads and
    uploads with progress still use aiohttp, imported when first needed."""

    def __init__(self, url: str, token: str | None = None, *, task_token: str | None = None,
                 timeout: float = 60.0, plain: bool = False) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.task_token = task_token
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        try:
            self._plain = plainhttp.Pool(self.url) if plain else None
        except ValueError as exc:
            raise errors.InvalidArgument(f"the master's address must be an http:// or https:// "
                                         f"URL, not {url!r}") from exc
        # A stored token not yet seen to work: called once if the master refuses it (401), to
        # sign in again; the refused call is then sent again (it did nothing). Saves a command
        # the round trip of checking the token first.
        self.renew: Callable[[], Awaitable[None]] | None = None
        self._renewal: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._plain is not None:
            self._plain.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.task_token:
            headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {self.task_token}"
        return headers

    async def request(
        self, method: str, path: str, *, body: Any = None, params: Any = None,
        timeout: float | None = None, raw: bytes | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Any:
        data: Any = raw if raw is not None else (json.dumps(body) if body is not None else None)
        try:
            answer = await self._request(method, path, data, params, timeout, progress)
        except errors.Unauthenticated:
            if self._renewal is None:  # the first refused call signs in; calls made at the
                if self.renew is None:  # same time (pages asked at once) wait for it
                    raise
                self._renewal = asyncio.ensure_future(self.renew())
                self.renew = None
            await asyncio.shield(self._renewal)
            return await self._request(method, path, data, params, timeout, progress)
        self.renew = None  # the token works
        return answer

    async def _confirmed(self) -> None:
        """A stored token checked (and renewed if refused) before a stream or download, whose
        refusal `request` cannot send again."""
        if self.renew is not None:
            await self.me()

    async def _request(self, method: str, path: str, data: str | bytes | None, params: Any,
                       timeout: float | None,
                       progress: Callable[[int, int], None] | None) -> Any:
        if self._plain is not None and progress is None:
            return await self._plain_request(method, path, data, params, timeout)
        import aiohttp

        sent: Any = data
        if progress is not None and isinstance(data, str | bytes):
            sent = _chunks(data.encode() if isinstance(data, str) else data, progress)
        try:
            async with self.session.request(
                method, self.url + path, data=sent, params=params, headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=timeout or self._timeout),
            ) as resp:
                text = await resp.text()
                kind = resp.headers.get("Content-Type", "")
                if resp.status != 200:
                    raise errors.from_response(resp.status, text, url=self.url,
                                               request=f"{method} {path}", content_type=kind)
                if errors.web_page(kind, text):
                    raise errors.not_a_master(self.url, f"{method} {path}", resp.status, kind,
                                              text)
                return json.loads(text) if text else {}
        except aiohttp.ClientConnectionError as exc:
            raise errors.MasterUnreachable(f"cannot reach the master at {self.url}: {exc}") from exc
        except (aiohttp.ClientPayloadError, json.JSONDecodeError) as exc:
            raise errors.MasterUnreachable(
                f"the answer from {self.url} was cut short or garbled: {exc}") from exc
        except TimeoutError as exc:
            raise errors.MasterUnreachable(
                f"the master at {self.url} did not answer in time") from exc

    async def _plain_request(self, method: str, path: str, data: str | bytes | None,
                             params: Any, timeout: float | None) -> Any:
        pool = self._plain
        assert pool is not None
        body = data.encode() if isinstance(data, str) else data
        target, headers = plainhttp.target(path, params), self._headers()

        request = f"{method} {path}"

        def exchange() -> Any:  # on its thread: decoded while the next page comes
            status, answer, kind = pool.call(method, target, body, headers,
                                             timeout or self._timeout)
            if status != 200:
                return errors.from_response(status, answer, url=self.url, request=request,
                                            content_type=kind)
            if errors.web_page(kind, answer):
                return errors.not_a_master(self.url, request, status, kind, answer)
            return jsonfast.loads(answer) if answer else {}

        try:
            answer = await plainhttp.call_off_loop(exchange)
            if isinstance(answer, errors.DettuiError):
                raise answer
            return answer
        except plainhttp.AnswerTooLarge as exc:
            raise errors.TooLarge(f"the answer from {self.url} to {method} {path} is {exc}: "
                                  "not read") from exc
        except plainhttp.Redirected as exc:
            raise errors.MasterUnreachable(
                f"{self.url} redirects to {exc.location or 'nowhere'} (HTTP {exc.status}): give "
                "the master's own address with -m or DET_MASTER") from exc
        except TimeoutError as exc:
            raise errors.MasterUnreachable(
                f"the master at {self.url} did not answer in time") from exc
        except (http.client.HTTPException, ValueError) as exc:
            raise errors.MasterUnreachable(
                f"the answer from {self.url} was cut short or garbled: {exc}") from exc
        except OSError as exc:
            raise errors.MasterUnreachable(f"cannot reach the master at {self.url}: {exc}") from exc

    async def download(self, path: str, sink: Callable[[bytes], object]) -> int:
        """GET `path` as bytes, each chunk handed to `sink` as it arrives; the byte count."""
        import aiohttp

        await self._confirmed()

        total = 0
        try:
            async with self.session.get(self.url + path, headers=self._headers(),
                                        timeout=aiohttp.ClientTimeout(total=None,
                                                                      sock_read=300)) as resp:
                if resp.status != 200:
                    raise errors.from_response(
                        resp.status, await resp.text(), url=self.url, request=f"GET {path}",
                        content_type=resp.headers.get("Content-Type", ""))
                async for chunk in resp.content.iter_chunked(1 << 20):
                    sink(chunk)
                    total += len(chunk)
        except aiohttp.ClientConnectionError as exc:
            raise errors.MasterUnreachable(f"cannot reach the master at {self.url}: {exc}") from exc
        except aiohttp.ClientPayloadError as exc:
            raise errors.MasterUnreachable(f"the download from {self.url} was cut short: "
                                           f"{exc}") from exc
        return total

    async def _ndjson(self, path: str, params: Any = None) -> AsyncIterator[dict[str, Any]]:
        """NDJSON stream: yields each line's `result`; an `error` line raises."""
        import aiohttp

        await self._confirmed()

        try:
            async with self.session.get(self.url + path, params=params, headers=self._headers(),
                                        timeout=aiohttp.ClientTimeout(total=None)) as resp:
                if resp.status != 200:
                    raise errors.from_response(
                        resp.status, await resp.text(), url=self.url, request=f"GET {path}",
                        content_type=resp.headers.get("Content-Type", ""))
                async for line in resp.content:
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    if isinstance(item, dict) and "error" in item:
                        raise errors.DettuiError(errors.message_of(resp.status, line))
                    yield self._field(item, "result", dict, f"GET {path}")
        except aiohttp.ClientConnectionError as exc:
            raise errors.MasterUnreachable(f"cannot reach the master at {self.url}: {exc}") from exc
        except aiohttp.ClientPayloadError as exc:  # the master went away mid-stream
            raise errors.MasterUnreachable(f"the stream from {self.url} broke: {exc}") from exc

    async def stream(self, topics: list[str], *,
                     heartbeat: float = 30.0) -> AsyncIterator[dict[str, Any]]:
        """The master's push stream (WebSocket /api/v1/stream) for `topics`: yields each server
        message as a dict — per topic a snapshot, then diffs; `{"error": ...}` messages are
        yielded too (an unknown topic does not end the stream). Ends when the master closes
        the stream; raises Unauthenticated/PermissionDenied for a bad token and
        MasterUnreachable when the master cannot be reached or the connection breaks (also
        when, after `heartbeat` s without a message, a ping gets no pong in `heartbeat`/2 s:
        a master that hangs with its socket open)."""
        import aiohttp

        await self._confirmed()

        try:
            async with self.session.ws_connect(
                self.url + "/api/v1/stream", headers=self._headers(), heartbeat=heartbeat,
                max_msg_size=0,  # a snapshot of a big queue is one message
            ) as ws:
                await ws.send_json({"subscribe": topics})
                async for msg in ws:
                    if msg.type is aiohttp.WSMsgType.TEXT:
                        yield json.loads(msg.data)
                    elif msg.type is aiohttp.WSMsgType.ERROR:
                        raise errors.MasterUnreachable(
                            f"the stream from {self.url} broke: {ws.exception()}")
        except aiohttp.WSServerHandshakeError as exc:
            raise errors.from_status(exc.status, _handshake_message(exc)) from exc
        except aiohttp.ClientConnectionError as exc:
            raise errors.MasterUnreachable(f"cannot reach the master at {self.url}: {exc}") from exc
        except TimeoutError as exc:
            raise errors.MasterUnreachable(
                f"the master at {self.url} did not answer in time") from exc

    async def changes(self, topics: list[str], *, heartbeat: float = 30.0,
                      lost: Callable[[str], None] | None = None,
                      ) -> AsyncIterator[dict[str, Any]]:
        """`stream(topics)` that reconnects (with a fresh snapshot per topic, backing off up to
        5 s) whenever the connection ends or breaks, calling `lost(why)` each time before it
        waits; a bad token still raises."""
        waits = retry.delays(first=0.5)
        while True:
            why = f"the master at {self.url} closed the stream"
            try:
                async for message in self.stream(topics, heartbeat=heartbeat):
                    waits = retry.delays(first=0.5)
                    yield message
            except errors.MasterUnreachable as exc:
                why = exc.message
            if lost is not None:
                lost(why)
            await asyncio.sleep(next(waits))

    # --- typed helpers -----------------------------------------------------------------

    def _field(self, answer: Any, key: str, kind: type, request: str) -> Any:
        """`answer[key]`, which must be a `kind`: else the master's answer is not what a
        master sends, and that is the error (never a KeyError)."""
        value = answer.get(key) if isinstance(answer, dict) else None
        if not isinstance(value, kind):
            raise errors.bad_answer(self.url, request, key, kind)
        return value

    def _object(self, answer: Any, request: str) -> dict[str, Any]:
        """An answer that must be a JSON object."""
        if not isinstance(answer, dict):
            raise errors.bad_answer(self.url, request, None, dict)
        return dict(answer)

    async def _part(self, kind: type, key: str, method: str, path: str, **kw: Any) -> Any:
        """`request(method, path)`'s `key`, a `kind` (dict or list), copied."""
        return kind(self._field(await self.request(method, path, **kw), key, kind,
                                f"{method} {path}"))

    async def info(self) -> dict[str, Any]:
        return self._object(await self.request("GET", "/info", timeout=10), "GET /info")

    async def login(self, username: str, password: str) -> str:
        body = await self.request("POST", "/api/v1/auth/login",
                                  body={"username": username, "password": password,
                                        "isHashed": False}, timeout=15)
        self.token = self._field(body, "token", str, "POST /api/v1/auth/login")
        return self.token

    async def me(self) -> dict[str, Any]:
        return await self._part(dict, "user", "GET", "/api/v1/me")

    async def create_experiment(
        self, config_text: str, files: list[dict[str, Any]], *, activate: bool = True,
        validate_only: bool = False, progress: Callable[[int, int], None] | None = None,
    ) -> Any:
        body = {"activate": activate, "config": config_text, "modelDefinition": files,
                "parentId": None, "projectId": None, "template": None,
                "validateOnly": validate_only}
        return await self.request("POST", "/api/v1/experiments", body=body, timeout=600,
                                  progress=progress)

    async def paged(self, path: str, key: str, params: Params | None = None, *,
                    page_size: int = PAGE_SIZE) -> list[Any]:
        """Every item of a paginated list. The first page tells how long the list is; the
        pages after it are asked PAGES_AT_ONCE at a time (the master reads them side by side)
        at the offsets the first one's size gives; if the list grew meanwhile, the rest is read
        on from the last endIndex, as Determined's read_paginated does."""
        base = _pairs(params)

        async def at(offset: int) -> dict[str, Any]:
            body = await self.request("GET", path, params=[
                *base, ("limit", str(page_size)), ("offset", str(offset))])
            self._field(body, key, list, f"GET {path}")
            return dict(body)

        items: list[Any] = []
        offset = 0
        while True:
            body = await at(offset)
            items += body[key]
            end, total = _window(body)
            if end is None or total is None or end >= total or end <= offset:
                return items
            step = end - offset  # what the master gives a page (it may cap `limit`)
            ahead = list(range(end, total, step))[:PAGES_AT_ONCE]
            for body in await asyncio.gather(*(at(o) for o in ahead)):
                items += body[key]
                last_end, total = _window(body)
                if last_end is None or total is None or last_end >= total:
                    return items
            offset = last_end

    async def page(self, path: str, key: str, params: Params | None = None, *,
                   offset: int = 0, limit: int = PAGE_SIZE) -> tuple[list[Any], int]:
        """One page of a paginated list, and how many items the whole list has."""
        body = await self.request("GET", path, params=[
            *_pairs(params), ("limit", str(limit)), ("offset", str(offset))])
        items = self._field(body, key, list, f"GET {path}")
        return list(items), _window(body)[1] or 0

    async def experiments(self, *, archived: bool | None = False,
                          config: bool = True) -> list[dict[str, Any]]:
        """Every experiment; without `config` and `originalConfig` unless `config` (a list of
        10,000 is a third of the bytes then)."""
        params = {} if archived is None else {"archived": str(archived).lower()}
        if not config:
            params["omitConfig"] = "true"
        return await self.paged("/api/v1/experiments", "experiments", params)

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return await self._part(dict, "experiment", "GET", f"/api/v1/experiments/{exp_id}")

    async def experiment_action(self, exp_id: int, action: str) -> None:
        await self.request("POST", f"/api/v1/experiments/{exp_id}/{action}")

    async def delete_experiment(self, exp_id: int) -> None:
        """Delete an ended experiment with its checkpoints, logs and metrics."""
        await self.request("DELETE", f"/api/v1/experiments/{exp_id}")

    async def set_experiment_priority(self, exp_id: int, priority: int) -> None:
        await self.request("PATCH", f"/api/v1/experiments/{exp_id}",
                           body={"id": exp_id, "resources": {"priority": priority}})

    async def preview_gc(self, exp_id: int, policy: GcPolicy) -> list[dict[str, Any]]:
        """The checkpoints `policy` would delete (Determined's preview_gc rows)."""
        body = await self.request("GET", f"/experiments/{exp_id}/preview_gc", params={
            "save_experiment_best": str(policy.experiment_best),
            "save_trial_best": str(policy.trial_best),
            "save_trial_latest": str(policy.trial_latest)})
        return list(self._field(body, "checkpoints", list,
                                f"GET /experiments/{exp_id}/preview_gc"))

    async def set_gc_policy(self, exp_id: int, policy: GcPolicy) -> None:
        await self.request("PATCH", f"/api/v1/experiments/{exp_id}", body={
            "id": exp_id, "checkpointStorage": {"saveExperimentBest": policy.experiment_best,
                                                "saveTrialBest": policy.trial_best,
                                                "saveTrialLatest": policy.trial_latest}})

    async def trials(self, exp_id: int) -> list[dict[str, Any]]:
        return await self.paged(f"/api/v1/experiments/{exp_id}/trials", "trials")

    async def trial(self, trial_id: int) -> dict[str, Any]:
        return await self._part(dict, "trial", "GET", f"/api/v1/trials/{trial_id}")

    async def checkpoints(self, exp_id: int, *, limit: int | None = None,
                          newest_first: bool = False, sort_by: str | None = None,
                          states: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The experiment's checkpoints (in `states`, if given), every one or the first
        `limit`: by report time, or by `sort_by` (a sortByAttr, in the master's order:
        SORT_BY_SEARCHER_METRIC is best first)."""
        path = f"/api/v1/experiments/{exp_id}/checkpoints"
        params = _checkpoint_params(newest_first, sort_by, states)
        if limit is not None:
            return (await self.page(path, "checkpoints", params, limit=limit))[0]
        return await self.paged(path, "checkpoints", params)

    async def newest_checkpoints(self, exp_id: int, limit: int) -> tuple[list[dict[str, Any]],
                                                                        int]:
        """The experiment's newest `limit` checkpoints, and how many it has."""
        return await self.page(f"/api/v1/experiments/{exp_id}/checkpoints", "checkpoints",
                               _checkpoint_params(True, None, ()), limit=limit)

    async def trial_checkpoints(self, trial_id: int, *, limit: int, newest_first: bool = False,
                                sort_by: str | None = None,
                                states: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """One trial's first `limit` checkpoints, in the order `checkpoints` gives."""
        return (await self.page(f"/api/v1/trials/{trial_id}/checkpoints", "checkpoints",
                                _checkpoint_params(newest_first, sort_by, states),
                                limit=limit))[0]

    async def checkpoint(self, uuid: str) -> dict[str, Any]:
        return await self._part(dict, "checkpoint", "GET", f"/api/v1/checkpoints/{uuid}")

    async def delete_checkpoints(self, uuids: list[str]) -> None:
        """`det checkpoint delete`: the checkpoints' files out of storage, records DELETED."""
        await self.request("DELETE", "/api/v1/checkpoints", body={"checkpointUuids": uuids})

    async def download_checkpoint(self, uuid: str, sink: Callable[[bytes], object]) -> int:
        """The checkpoint's files as the master's tar.gz stream (`download`)."""
        return await self.download(f"/checkpoints/{uuid}", sink)

    async def metrics(self, trial_id: int, group: str | None = None, *,
                      after_steps: int | None = None) -> list[dict[str, Any]]:
        """The trial's reports (of `group`), every one, or those past `after_steps`."""
        params = {"group": group} if group else {}
        if after_steps is not None:
            params["afterSteps"] = str(after_steps)
        return await self.paged(f"/api/v1/trials/{trial_id}/metrics", "metrics", params)

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        """Each numeric metric of the trial's `group` as at most `max_points` points
        (downsampled by the master): {"series": [{"name", "steps", "values"}], "lastSteps"}."""
        params = {"group": group, "maxPoints": str(max(2, max_points))}
        if after_steps is not None:
            params["afterSteps"] = str(after_steps)
        path = f"/api/v1/trials/{trial_id}/metrics"
        return self._object(await self.request("GET", path, params=params), f"GET {path}")

    async def trial_log_search(self, trial_id: int, text: str, *, limit: int = 100,
                               newest: bool = False) -> list[dict[str, Any]]:
        """Up to `limit` of the trial's log lines holding `text` (the newest first with
        `newest`)."""
        params = [("follow", "false"), ("searchText", text), ("limit", str(limit)),
                  ("orderBy", "ORDER_BY_DESC" if newest else "ORDER_BY_ASC")]
        return [item async for item in self._ndjson(f"/api/v1/trials/{trial_id}/logs",
                                                    params=params)]

    def trial_logs(self, trial_id: int, *, follow: bool = False, ranks: list[int] | None = None,
                   tail: int | None = None) -> AsyncIterator[dict[str, Any]]:
        params: list[tuple[str, str]] = [("follow", str(follow).lower())]
        params += [("rankIds", str(r)) for r in ranks or []]
        if tail:
            params += [("limit", str(tail)), ("orderBy", "ORDER_BY_DESC")]
        return self._ndjson(f"/api/v1/trials/{trial_id}/logs", params=params)

    async def jobs(self, pool: str | None = None) -> list[dict[str, Any]]:
        """Every live job (dettui's queue: paused ones too, unlike Determined's list)."""
        params = {"includeIdle": "true"} | ({"resourcePool": pool} if pool else {})
        jobs = await self.paged("/api/v1/job-queues-v2", "jobs", params)
        return [self._field(j, "full", dict, "GET /api/v1/job-queues-v2") for j in jobs]

    async def update_job(self, job_id: str, *, priority: int | None = None,
                         weight: float | None = None, resource_pool: str | None = None,
                         ahead_of: str | None = None, behind_of: str | None = None) -> None:
        """Change one job in the queue: its priority, weight or pool, or move it ahead of or
        behind another job."""
        update: dict[str, Any] = {"jobId": job_id, "priority": priority, "weight": weight,
                                  "resourcePool": resource_pool}
        update |= {k: v for k, v in (("aheadOf", ahead_of), ("behindOf", behind_of)) if v}
        await self.request("POST", "/api/v1/job-queues", body={"updates": [update]})

    async def tasks(self) -> list[dict[str, Any]]:
        """The running allocations (Determined's allocationIdToSummary)."""
        body = await self.request("GET", "/api/v1/tasks")
        return list(self._field(body, "allocationIdToSummary", dict,
                                "GET /api/v1/tasks").values())

    async def agents(self) -> list[dict[str, Any]]:
        return await self._part(list, "agents", "GET", "/api/v1/agents")

    async def set_agent_enabled(self, agent_id: str, enabled: bool, *,
                                drain: bool = True) -> None:
        """Enable an agent, or disable it (with `drain`, its running work finishes)."""
        await self.request("POST", f"/api/v1/agents/{agent_id}/"
                           f"{'enable' if enabled else 'disable'}",
                           body={"agentId": agent_id, "drain": drain})

    async def create_agent_credential(self, description: str) -> dict[str, Any]:
        """A new agent credential: {"credential": ..., "token": the secret, shown once}."""
        return dict(await self.request("POST", "/api/v1/agent-credentials",
                                       body={"description": description}))

    async def agent_credentials(self) -> list[dict[str, Any]]:
        return await self._part(list, "credentials", "GET", "/api/v1/agent-credentials")

    async def revoke_agent_credential(self, cred_id: int) -> None:
        await self.request("DELETE", f"/api/v1/agent-credentials/{cred_id}")

    async def pools(self) -> list[dict[str, Any]]:
        return await self._part(list, "resourcePools", "GET", "/api/v1/resource-pools")

    # --- users --------------------------------------------------------------------------

    async def users(self) -> list[dict[str, Any]]:
        return await self._part(list, "users", "GET", "/api/v1/users")

    async def user_by_name(self, username: str) -> dict[str, Any]:
        return await self._part(dict, "user", "GET", f"/api/v1/users/{username}/by-username")

    async def create_user(self, username: str, password: str, *,
                          admin: bool = False) -> dict[str, Any]:
        body = {"user": {"username": username, "admin": admin, "active": True},
                "password": password, "isHashed": False}
        return await self._part(dict, "user", "POST", "/api/v1/users", body=body)

    async def set_user_active(self, user_id: int, active: bool) -> None:
        await self.request("PATCH", f"/api/v1/users/{user_id}", body={"active": active})

    async def set_password(self, user_id: int, password: str) -> None:
        await self.request("PATCH", f"/api/v1/users/{user_id}",
                           body={"password": password, "isHashed": False})

    async def link_agent_user(self, user_id: int, uid: int, gid: int, user: str,
                              group: str) -> dict[str, Any]:
        """`det user link-with-agent-user`: the Unix user and group the user's trials run as."""
        body = {"agentUserGroup": {"agentUid": uid, "agentGid": gid, "agentUser": user,
                                   "agentGroup": group}}
        got = await self.request("PATCH", f"/api/v1/users/{user_id}", body=body)
        return dict(self._field(got, "user", dict, f"PATCH /api/v1/users/{user_id}"))

    # --- the agent protocol (dettui.protocol): what an agent calls --------------------------

    async def register_agent(self, body: protocol.RegisterAgentBody) -> protocol.Registered:
        from dettui import protocol

        return protocol.Registered.model_validate(await self.request(
            "POST", "/api/v1/agents/register", body=body.wire(), timeout=15))

    async def agent_heartbeat(self, agent_id: str, body: protocol.HeartbeatBody) -> None:
        await self.request("POST", f"/api/v1/agents/{agent_id}/heartbeat", body=body.wire(),
                           timeout=10)

    async def agent_work(self, agent_id: str,
                         timeout: float) -> list[protocol.StartWork | protocol.KillWork]:
        """The work long-poll: waits up to `timeout` seconds for something to do."""
        from dettui import protocol

        return protocol.WorkBody.model_validate(await self.request(
            "GET", f"/api/v1/agents/{agent_id}/work",
            params={"timeout_seconds": str(timeout)}, timeout=timeout + 15)).work

    async def agent_logs(self, agent_id: str, lines: list[dict[str, Any]]) -> None:
        """Ship log lines (`protocol.AgentLogLine` objects, as the spool keeps them)."""
        await self.request("POST", f"/api/v1/agents/{agent_id}/logs", body={"logs": lines},
                           timeout=30)

    async def allocation_exit(self, agent_id: str, alloc_id: str,
                              body: protocol.AllocationExitBody) -> None:
        await self.request("POST", f"/api/v1/agents/{agent_id}/allocations/{alloc_id}/exit",
                           body=body.wire(), timeout=15)

    async def agent_drain(self, agent_id: str) -> None:
        await self.request("POST", f"/api/v1/agents/{agent_id}/drain", timeout=5)

    async def agent_leave(self, agent_id: str) -> None:
        await self.request("POST", f"/api/v1/agents/{agent_id}/leave", timeout=5)

    async def slurm_start(self, alloc_id: str) -> protocol.StartWork:
        """A Slurm allocation's start message, for its node parts (asked with its token)."""
        from dettui import protocol

        return protocol.StartWork.model_validate(await self.request(
            "GET", f"/api/v1/allocations/{alloc_id}/slurm/start"))

    async def context_directory(self, task_id: str) -> bytes:
        """A task's model context, as the .tar.gz it was packed into."""
        body = await self.request("GET", f"/api/v1/tasks/{task_id}/context_directory",
                                  timeout=300)
        packed = body.get("b64Tgz") if isinstance(body, dict) else None
        if packed is not None and not isinstance(packed, str):
            raise errors.bad_answer(self.url, f"GET /api/v1/tasks/{task_id}/context_directory",
                                    "b64Tgz", str)
        return base64.b64decode(packed or "")

    async def trial_log_page(self, trial_id: int, *, limit: int, before: int | None = None,
                             after: int | None = None, ranks: list[int] | None = None,
                             since: float | None = None,
                             until: float | None = None) -> list[dict[str, Any]]:
        """One page of a trial's log lines, oldest first: the newest `limit` lines before the
        line id `before` (the log's tail without it), or with `after`, the oldest `limit`
        after that id; only ranks `ranks` and lines stamped between `since` and `until` (Unix
        seconds) if given."""
        params = [("follow", "false"), ("limit", str(limit)),
                  *_log_filters(ranks, since, until)]
        if after is not None:
            params.append(("idAfter", str(after)))
        else:
            params.append(("orderBy", "ORDER_BY_DESC"))
        if before is not None:
            params.append(("idBefore", str(before)))
        lines = [line async for line in self._ndjson(f"/api/v1/trials/{trial_id}/logs",
                                                     params=params)]
        return lines if after is not None else lines[::-1]

    def follow_trial_logs(self, trial_id: int, *, after: int, ranks: list[int] | None = None,
                          since: float | None = None,
                          until: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """A trial's log lines after the line id `after` (0: from the start), then each new
        one until the trial ends; filtered as `trial_log_page`."""
        params = [("follow", "true"), ("idAfter", str(after)),
                  *_log_filters(ranks, since, until)]
        return self._ndjson(f"/api/v1/trials/{trial_id}/logs", params=params)

    async def metric_pages(self, trial_id: int, group: str | None = None, *,
                           page_size: int = 25_000) -> AsyncIterator[list[dict[str, Any]]]:
        """The trial's reports (of `group`) by steps, a page at a time, so a history of a
        million reports is never held whole (1M of them: 34 s and 100 MiB peak at 25,000 a
        page, 62 s and 60 MiB at 10,000, on the 2-core test machine under load). Each page
        goes on from the last one's steps (`afterSteps`: an index walk on the master, not an
        offset into the whole list); the reports at those steps already read are skipped by
        a small offset."""
        path = f"/api/v1/trials/{trial_id}/metrics"
        steps, read = -1, 0  # the last steps read, and how many reports at them
        while True:
            params = {"afterSteps": str(steps - 1 if read else steps)} | (
                {"group": group} if group else {})
            items, left = await self.page(path, "metrics", params, offset=read, limit=page_size)
            page = [m for m in items if isinstance(m, dict)]
            if not page:
                return
            yield page
            last = int(page[-1]["stepsCompleted"])
            same = sum(1 for m in page if int(m["stepsCompleted"]) == last)
            if read + len(items) >= left:  # (the master may give less than `page_size`)
                return
            steps, read = last, same + (read if last == steps else 0)

    async def metric_times(self, trial_id: int, group: str,
                           anchors: int = 16) -> list[tuple[int, str]]:
        """(steps, reportTime) of up to `anchors` (2..64) of the trial's `group` reports,
        spread evenly from its first to its last, for a chart's time axis (a time between two
        of them is interpolated by steps): a few small pages, never the whole history."""
        anchors = min(max(anchors, 2), 64)
        path, params = f"/api/v1/trials/{trial_id}/metrics", {"group": group}
        found, total = await self.page(path, "metrics", params, limit=anchors)
        if total > len(found):  # the first report read, then one report at each other anchor
            found = found[:1]
            offsets = sorted({round(i * (total - 1) / (anchors - 1)) for i in range(1, anchors)})
            for items, _ in await asyncio.gather(*(self.page(path, "metrics", params, offset=o,
                                                             limit=1) for o in offsets)):
                found += items
        return [(int(r["stepsCompleted"]), str(r["reportTime"])) for r in found
                if isinstance(r, dict) and r.get("reportTime") is not None]


def _log_filters(ranks: list[int] | None, since: float | None,
                 until: float | None) -> list[tuple[str, str]]:
    """The logs route's rank and time filters (RFC 3339 stamps, as Determined's)."""
    from datetime import UTC, datetime

    params = [("rankIds", str(r)) for r in ranks or []]
    for name, at in (("timestampAfter", since), ("timestampBefore", until)):
        if at is not None:
            stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
            params.append((name, stamp))
    return params
