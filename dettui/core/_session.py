"""A tiny synchronous HTTP session for training processes (stdlib only), with Determined's
retry policy: every method is retried on connection errors, with backoff.

A 503 means "not now" (the master's disk is full, it is busy): the master stored nothing of
the request, so the same request is sent again, for up to PATIENCE seconds (a report is not
dropped because an admin took a few minutes to free space), and the trial's log says so, once
when it starts waiting and once when the master took it."""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from dettui import errors, retry

RETRIES = 20
BACKOFF = 0.5
PATIENCE = 600.0  # seconds a request answered 503 (e.g. the master's disk is full) is retried


def _encode(value: Any) -> Any:
    """NaN and infinities travel as strings, as Determined's client sends them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


class Session:
    def __init__(self, master: str, *, task_token: str | None = None,
                 user_token: str | None = None) -> None:
        self.master = master.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if task_token:
            self.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {task_token}"
        if user_token:
            self.headers["Authorization"] = f"Bearer {user_token}"

    def request(self, method: str, path: str, body: Any = None, *,
                timeout: float = 60.0, retries: int = RETRIES) -> Any:
        data = json.dumps(_encode(body)).encode() if body is not None else None
        waits = itertools.islice(retry.delays(first=BACKOFF, cap=10.0), retries)
        # calls that set their own `retries` (a detached run's setup, its heartbeat) count a
        # 503 against them as before; the rest wait for up to PATIENCE
        later = _Later(method, path) if retries == RETRIES else None
        while True:
            req = urllib.request.Request(self.master + path, data=data, method=method,
                                         headers=self.headers)
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    raw = resp.read()
                    if later is not None:
                        later.done()
                    return json.loads(raw) if raw.strip() else {}
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code == 503 and later is not None:
                    wait = later.wait(errors.message_of(exc.code, raw))
                else:
                    wait = next(waits, None) if exc.code in (502, 503, 504) else None
                if wait is None:
                    raise errors.from_response(exc.code, raw) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                wait = next(waits, None)
                if wait is None:
                    raise errors.MasterUnreachable(
                        f"cannot reach the master at {self.master}: {exc}") from exc
            time.sleep(wait)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body if body is not None else {}, **kw)


class _Later:
    """One request's waits for a master that answered 503 ("not now"), for up to PATIENCE
    seconds, said in the trial's log (stderr) when they begin and when they end."""

    def __init__(self, method: str, path: str) -> None:
        self.what = f"{method} {path.split('?', 1)[0]}"
        self.started: float | None = None
        self._waits = retry.delays(first=BACKOFF, cap=5.0, give_up_after=PATIENCE)

    def wait(self, why: str) -> float | None:
        """Seconds to wait before sending it again; None once PATIENCE has passed."""
        if self.started is None:
            self.started = time.monotonic()
            _say(f"dettui: the master cannot take {self.what} now ({why}); sending it again "
                 f"for up to {PATIENCE:.0f} s")
        wait = next(self._waits, None)
        if wait is None:
            _say(f"dettui: giving up {self.what} after {PATIENCE:.0f} s: {why}")
        return wait

    def done(self) -> None:
        if self.started is not None:
            _say(f"dettui: the master took {self.what} after "
                 f"{time.monotonic() - self.started:.0f} s")
            self.started = None


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
