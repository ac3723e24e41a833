"""Blocking HTTP/1.1 with kept-alive connections, from the standard library (http.client).

For one-shot commands: `dettui job list` spent 0.12 s of its 0.6 s importing aiohttp (its
connector builds the system's CA store at import). The async client runs these calls on daemon
threads (`call_off_loop`), so a command interrupted mid-request exits at once instead of
waiting for the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import select
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_IDLE = 8  # kept-alive connections per pool; a client asks at most a few pages at once
MAX_ANSWER = 1 << 30  # bytes of one answer read into memory (a 10,000-job queue is 4 MiB)
# A reused connection the server closed while it sat idle fails before any answer; such a
# request is sent again once on a fresh connection (only a GET: a POST may have been seen).
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class AnswerTooLarge(Exception):
    """An answer longer than MAX_ANSWER (it is not read on)."""


class Redirected(Exception):
    """The server answered with a redirect (HTTP 3xx)."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(f"HTTP {status} to {location or 'nowhere'}")
        self.status = status
        self.location = location


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle kept-alive connection the server has closed (or written to, out of turn): it
    reads as ready. Such a one is not reused."""
    if conn.sock is None:
        return True
    try:
        return bool(select.select([conn.sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def target(path: str, params: dict[str, str] | list[tuple[str, str]] | None) -> str:
    """The request target: `path` percent-encoded (a user name or an agent id in it may hold a
    space, a `?` or a `%`), then its query (spaces as %20, every key as given)."""
    quoted = urllib.parse.quote(path, safe="/:@!$&'()*+,;=~")
    if not params:
        return quoted
    pairs = list(params.items()) if isinstance(params, dict) else list(params)
    query = urllib.parse.urlencode([(k, str(v)) for k, v in pairs],
                                   quote_via=urllib.parse.quote)
    return f"{quoted}?{query}"


class Pool:
    """Connections to one origin (`http://host:port` or https), reused while the server keeps
    them open. Thread-safe: each call takes an idle connection or opens one."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._tls: Any = None  # an https master's context: the CA store is read once

    def _open(self, timeout: float) -> http.client.HTTPConnection:
        if self.https:
            if self._tls is None:
                import ssl  # only an https master pays for the CA store

                self._tls = ssl.create_default_context()
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _take(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open(timeout), False
            if not _dropped(conn):
                break
            conn.close()
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def call(self, method: str, target: str, body: bytes | None = None,
             headers: dict[str, str] | None = None,
             timeout: float = 60.0) -> tuple[int, bytes, str]:
        """Send one request; its status, whole body and Content-Type. Raises OSError (refused,
        timed out, reset), http.client.HTTPException (a garbled or cut-short answer),
        AnswerTooLarge or Redirected (a redirect is not followed: the address to use is the
        user's to give)."""
        headers = dict(headers or {})
        if body is not None:
            headers.setdefault("Content-Type", "application/json")
        while True:
            conn, reused = self._take(timeout)
            try:
                conn.request(method, self.prefix + target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read(MAX_ANSWER + 1)
            except _STALE:
                conn.close()
                if reused and method == "GET":
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if len(data) > MAX_ANSWER:
                conn.close()  # the rest of it is still on the wire
                raise AnswerTooLarge(f"over {MAX_ANSWER >> 20} MiB")
            if resp.will_close:
                conn.close()
            else:
                self._give_back(conn)
            if 300 <= resp.status < 400:
                raise Redirected(resp.status, resp.getheader("Location") or "")
            return resp.status, data, resp.getheader("Content-Type") or ""

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


async def call_off_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on a daemon thread of its own, awaited. Unlike asyncio.to_thread, a thread
    still blocked when the command ends (Ctrl-C, a timeout) does not hold up the exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as error:  # handed to the awaiting task
            result, exc = None, error
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for it
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=run, daemon=True, name="dettui-http").start()
    return await done
