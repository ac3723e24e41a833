"""A tiny synchronous HTTP session for training processes (stdlib only), with Determined's
retry policy: every method is retried on connection errors, with backoff."""

from __future__ import annotations

import itertools
import json
import math
import time
import urllib.error
import urllib.request
from typing import Any

from dettui import errors, retry

RETRIES = 20
BACKOFF = 0.5


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
        while True:
            req = urllib.request.Request(self.master + path, data=data, method=method,
                                         headers=self.headers)
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw.strip() else {}
            except urllib.error.HTTPError as exc:
                raw = exc.read()
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
