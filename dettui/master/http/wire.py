"""Helpers for Determined's wire conventions: timestamps, pagination, enums, NaN strings."""

from __future__ import annotations

import base64
import functools
import math
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from dettui.errors import InvalidArgument
from dettui.jsonfast import dumps as json_bytes
from dettui.master import offload
from dettui.master.store.page import Page, order_of


def ts(t: float | None) -> str | None:
    """RFC 3339 UTC with a Z and microseconds, as the real master emits."""
    return None if t is None else _ts(t)


@functools.lru_cache(maxsize=16_384)  # a job list shows the same times again and again
def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(value: Any) -> float | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"invalid timestamp {value!r}")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise InvalidArgument(f"invalid timestamp {value!r}") from exc


def page_of(request: web.Request) -> Page:
    """The request's `offset`, `limit` and `orderBy` (non-numbers and unknown orders: 400)."""
    return Page(query_int(request, "offset", 0), query_int(request, "limit", 0),
                order_of(request.query.get("orderBy")))


def paginate(items: list[Any], request: web.Request) -> tuple[list[Any], dict[str, int]]:
    """A page of a list built in memory (short lists: pools, users, workloads)."""
    window = page_of(request).window(len(items))
    return window.of(items), window.pagination()


def query_int(request: web.Request, name: str, default: int) -> int:
    """An integer query parameter: ASCII digits with an optional '-', within 64 bits."""
    raw = request.query.get(name)
    if raw in (None, ""):
        return default
    assert raw is not None
    digits = raw.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()) or abs(int(raw)) >= 2**63:
        raise InvalidArgument(f"query parameter {name}: expected an integer, got {_shown(raw)}")
    return int(raw)


def query_float(request: web.Request, name: str, default: float) -> float:
    """A finite number from the query (NaN and infinities are refused)."""
    raw = request.query.get(name)
    if raw in (None, ""):
        return default
    assert raw is not None
    try:
        value = float(raw) if raw.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InvalidArgument(f"query parameter {name}: expected a finite number, got "
                              f"{_shown(raw)}")
    return value


def _shown(raw: str) -> str:
    return repr(raw) if len(raw) <= 40 else repr(raw[:37] + "...")


def query_bool(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name)
    if raw in (None, ""):
        return None
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise InvalidArgument(f"query parameter {name}: expected true or false, got {raw!r}")


def path_int(request: web.Request, name: str) -> int:
    return parse_id(request.match_info[name], name)


def parse_id(raw: str, name: str) -> int:
    """An id from a path or query: ASCII digits only, within SQLite's 64-bit integers."""
    if not (raw.isascii() and raw.isdigit()) or int(raw) >= 2**63:
        raise InvalidArgument(f"{name}: expected an integer id, got {_shown(raw)}")
    return int(raw)


_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode_number(value: Any) -> Any:
    """Determined sends NaN and infinities as strings; turn them back into floats."""
    if isinstance(value, str) and value in _SPECIAL:
        return _SPECIAL[value]
    return value


def encode_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def encode_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: encode_number(v) for k, v in metrics.items()}


def _b64_json(key: str, data: bytes) -> bytes:
    """`{"<key>": "<base64 of data>"}` as bytes, encoded in slices so the GIL is released
    between them (base64 needs no JSON escaping)."""
    step = 3 * 1024 * 1024
    parts = [b'{"', key.encode(), b'": "']
    parts += [base64.b64encode(data[i:i + step]) for i in range(0, len(data), step)]
    parts.append(b'"}')
    return b"".join(parts)


async def b64_response(key: str, data: bytes | None) -> web.Response:
    """A blob (a model context) as Determined sends it: base64 in a JSON object, built on the
    CPU pool, never on the event loop."""
    body = await offload.cpu(_b64_json, key, data or b"")
    return web.Response(body=body, content_type="application/json")


SMALL_BLOB = 256 * 1024  # bytes of a blob encoded on the thread that read it (`b64_small`)


def b64_small(key: str, data: bytes | None) -> bytes | None:
    """`b64_response`'s body, made at once when `data` is small (on a store reader's thread,
    in the read that found it: one hop off the loop, not two, per trial's context); None for a
    larger blob, which goes to the CPU pool."""
    data = data or b""
    return _b64_json(key, data) if len(data) <= SMALL_BLOB else None


def blob_response(body: bytes) -> web.Response:
    """An answer `b64_small` made."""
    return web.Response(body=body, content_type="application/json")


def json_response(data: Any, status: int = 200) -> web.Response:
    """`web.json_response`, encoded with orjson (`jsonfast`: ten times `json`'s speed, and a
    create or a heartbeat answers on the event loop, under the master's one GIL)."""
    return web.Response(body=json_bytes(data), status=status, content_type="application/json")


async def big_json_response(data: Any) -> web.Response:
    """`web.json_response` for bodies that grow with the data (lists of experiments, trials,
    metrics, logs): encoded on the CPU pool, not on the event loop."""
    body = await offload.cpu(json_bytes, data)
    return web.Response(body=body, content_type="application/json")


STREAM_CHUNK = 5_000  # items a long read takes from the store, and encodes, at a time


def json_items(items: list[Any], first: bool) -> bytes:
    """Items of a JSON list being written piece by piece: `a,b,c` (with a leading comma unless
    they are the `first`). Run on the CPU pool."""
    text = b",".join(json_bytes(item) for item in items)
    return text if first or not text else b"," + text
