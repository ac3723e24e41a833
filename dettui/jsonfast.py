"""JSON on hot paths: orjson, and `json` for what orjson refuses.

The master's large bodies (a 10,000-job queue, a page of experiments, a stream diff) and the
JSON columns every list decodes (an experiment's 2 KiB config) are handled under its one GIL;
a one-shot command decodes the master's answers with it too (a 10,000-job queue's 2 MiB):
orjson encodes them ten times and decodes them three times faster than `json`. Both give the
same values back, with two exceptions taken care of here: orjson refuses what `json` accepts
(an integer past 64 bits, nesting past 254 levels, the `NaN` and `Infinity` tokens `json`
writes), and those go to `json`; and on output a float that is not finite is `null` (valid
JSON) where `json` wrote an invalid `NaN`. The wire carries metrics as Determined's strings
("NaN", `wire.special`) before they are encoded.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(data: Any) -> bytes:
    """`data` as JSON bytes (keys that are not text become text, as with `json`)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(data).encode()


def dumps_text(data: Any) -> str:
    """`dumps` as text (a websocket's text frame)."""
    return dumps(data).decode()


def loads(text: str | bytes) -> Any:
    """A JSON value back (what `json.dumps` wrote, `NaN` included; a `ValueError` if it is not
    JSON)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
