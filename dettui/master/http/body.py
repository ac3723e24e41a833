"""A request's body: read within its operation's cap, and decoded as JSON the master can store
(64-bit integers, finite numbers, valid Unicode, bounded nesting)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from aiohttp import web

from dettui.errors import InvalidArgument, TooLarge
from dettui.master import offload
from dettui.master.http.openapi import op_of

BIG_BODY = 256 * 1024  # bytes of JSON decoded off the event loop
MAX_JSON_DEPTH = 100  # levels of nested lists and objects in a request body
BODY: web.RequestKey[bytes] = web.RequestKey("body")  # once read


async def read_body(request: web.Request) -> bytes:
    """The request body, within its operation's cap (`openapi.op(max_body=...)`, 16 MiB unless
    declared): a 413 as soon as it is known to be over, not after reading it all."""
    if BODY not in request:
        request[BODY] = b"".join([chunk async for chunk in body_chunks(request)])
    return request[BODY]


async def body_chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The request body's chunks as they arrive, within its operation's cap (a 413 as soon as
    it is known to be over): a body of 100 MB or more goes to a worker process as it arrives
    (`offload.isolated_body`), since joining or pickling it here would hold the GIL, and with
    it the event loop, for 100 ms and more."""
    cap = op_of(request.match_info.handler).max_body
    size = request.content_length
    if size is not None and size > cap:
        raise _too_large(request, size, cap)
    size = 0
    try:
        async for chunk in request.content.iter_chunked(1024 * 1024):
            size += len(chunk)
            if size > cap:
                raise _too_large(request, size, cap)
            yield chunk
    except ConnectionError as exc:  # the client went away mid-body (an agent stopped, say)
        raise InvalidArgument(f"the request body was cut short ({size} bytes read): "
                              f"the connection was lost") from exc


def _too_large(request: web.Request, size: int, cap: int) -> TooLarge:
    resource = request.match_info.route.resource
    where = resource.canonical if resource is not None else request.path
    return TooLarge(f"the request body ({size:,} bytes or more) is over the limit of {cap:,} "
                    f"bytes for {request.method} {where}")


async def read_json(request: web.Request) -> object:
    """The request body as JSON (`decode_json`); an empty body is `{}` (Determined's action
    POSTs send none). A large body is decoded on the CPU pool, not on the event loop."""
    raw = await read_body(request)
    if len(raw) > BIG_BODY:
        return await offload.cpu(decode_json, raw)
    return decode_json(raw)


def decode_json(raw: bytes, nan_tokens: bool = False) -> object:
    """JSON from a request body, every value of which the master can store and send back:
    UTF-8 text, nested at most MAX_JSON_DEPTH levels, integers within 64 bits, numbers finite,
    strings valid Unicode (a lone UTF-16 surrogate such as `"\\ud800"` is not). Anything else
    is an InvalidArgument naming where it is.

    Python's `NaN`, `Infinity` and `-Infinity` tokens are not JSON, and Determined's clients
    send those values as strings ("NaN"). Only a metrics report (`nan_tokens`) may use the
    tokens: they become those strings, which a metric value accepts (`wire.decode_number`) and
    a typed number refuses (`requests.Int64`, `requests.Finite`)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"malformed JSON body: not UTF-8 ({exc.reason} at byte "
                              f"{exc.start})") from exc
    if not text.strip():
        return {}
    try:
        data = json.loads(text, parse_constant=str if nan_tokens else _Token)
    except RecursionError as exc:
        raise InvalidArgument(_too_deep()) from exc
    except ValueError as exc:
        raise InvalidArgument(f"malformed JSON body: {exc}") from exc
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth(data) > MAX_JSON_DEPTH:
        raise InvalidArgument(_too_deep())
    if _SUSPECT.search(text) and (problem := _unstorable(data)) is not None:
        raise InvalidArgument(f"malformed JSON body: {problem}")
    return data


INT64 = range(-(2**63), 2**63)
# Text that may hold an integer past 64 bits (19 digits or more, not in a fraction), a number
# past a double (an exponent of 3 digits or more), an escaped surrogate or a NaN or Infinity
# token: only such bodies are walked (`_unstorable`), so a body of 300,000 metrics pays a
# regex, not a walk.
_SUSPECT = re.compile(r"(?<![\d.])\d{19}|[eE]\+?\d{3}|\\u[dD][89a-fA-F]|NaN|Infinity")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class _Token:
    """A `NaN`, `Infinity` or `-Infinity` token where none may be (found by `_unstorable`)."""

    text: str


def _unstorable(data: object) -> str | None:
    """Where `data` holds a value no store can keep (an integer past 64 bits, a number past a
    double, a lone surrogate) or a token that is not JSON, and what it is; None if nowhere."""
    stack: list[tuple[object, str]] = [(data, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if _SURROGATE.search(key):
                    return f"{where or 'body'}: a key is not valid Unicode (a lone surrogate)"
                stack.append((value, f"{where}.{_short(key)}" if where else _short(key)))
        elif isinstance(node, list):
            stack.extend((value, f"{where}[{i}]") for i, value in enumerate(node))
        elif (problem := _unstorable_scalar(node)) is not None:
            return f"{where or 'body'}: {problem}"
    return None


def _unstorable_scalar(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value not in INT64:
        return f"{_short(str(value))} is outside the 64-bit integers"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number too large for a double"
    if isinstance(value, str) and _SURROGATE.search(value):
        return "a string that is not valid Unicode (a lone surrogate)"
    if isinstance(value, _Token):
        return (f"{value.text} is not JSON (send the string \"{value.text}\", which only a "
                "metric value may be)")
    return None


def _short(text: str, cap: int = 40) -> str:
    return text if len(text) <= cap else text[:cap - 3] + "..."


def _too_deep() -> str:
    return f"malformed JSON body: nested more than {MAX_JSON_DEPTH} levels deep"


def _depth(data: object) -> int:
    """How deeply `data` nests lists and objects (iteratively: any depth is safe to measure)."""
    deepest = 0
    if not isinstance(data, dict | list):
        return 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        assert isinstance(children, Iterable)
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest
