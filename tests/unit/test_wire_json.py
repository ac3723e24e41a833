"""The master's JSON (`jsonfast`, `wire.json_bytes`): orjson where it can, `json` where it
cannot, and the same values read back either way."""

from __future__ import annotations

import json
import math
import random

from dettui import jsonfast
from dettui.master.http import wire
from dettui.models import JobState

_CHARS = "aé\u2603\U0001f600\"\\\n\t\x00/<>"


def _value(rng: random.Random, depth: int = 0) -> object:
    kinds = ["int", "float", "str", "bool", "none"] + (["list", "dict"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-2**63, 2**63 - 1)
    if kind == "float":
        return rng.uniform(-1e12, 1e12) * rng.choice([1, 1e-9, 1e9])
    if kind == "str":
        return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 8)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {str(_value(rng, 4)): _value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def test_a_body_reads_back_as_json_would_have_written_it() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        value = _value(rng)
        assert json.loads(wire.json_bytes(value)) == json.loads(json.dumps(value))


def test_what_orjson_refuses_is_written_by_json() -> None:
    huge = {"id": 2**70, "ids": [1, 2**64]}  # past 64 bits
    assert json.loads(wire.json_bytes(huge)) == huge
    deep: list[object] = []
    for _ in range(300):  # orjson stops at 254 levels
        deep = [deep]
    assert json.loads(wire.json_bytes(deep)) == deep


def test_keys_that_are_not_text_and_enums_are_written_as_json_writes_them() -> None:
    value = {1: "a", 2.5: "b", "state": JobState.QUEUED, None: 1}
    assert json.loads(wire.json_bytes(value)) == json.loads(json.dumps(value))


def test_a_float_that_is_not_finite_is_null_not_an_invalid_token() -> None:
    body = wire.json_bytes({"loss": math.nan, "best": math.inf})
    assert json.loads(body, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c))) == {
        "loss": None, "best": None}


def test_items_written_piece_by_piece_join_into_one_list() -> None:
    pieces = [wire.json_items([{"a": 1}, {"b": "é"}], True), wire.json_items([], False),
              wire.json_items([[2**70]], False)]
    assert json.loads(b"[" + b"".join(pieces) + b"]") == [{"a": 1}, {"b": "é"}, [2**70]]


def test_text_for_a_websocket_frame() -> None:
    assert jsonfast.dumps_text({"topic": "jobs", "n": [1, 2]}) == '{"topic":"jobs","n":[1,2]}'


def test_stored_json_reads_back_as_json_reads_it() -> None:
    """Columns were written by `json.dumps`: NaN and Infinity tokens, integers past 64 bits and
    deep nesting (which orjson refuses) read back as `json` reads them."""
    rng = random.Random(11)
    for _ in range(2_000):
        text = json.dumps(_value(rng))
        assert jsonfast.loads(text) == json.loads(text)
        assert jsonfast.loads(text.encode()) == json.loads(text)
    odd = json.dumps({"loss": math.inf, "big": 2**70, "deep": [[[[[[1]]]]]] * 2})
    assert jsonfast.loads(odd) == json.loads(odd)
    value = jsonfast.loads('{"loss": NaN}')["loss"]
    assert math.isnan(value)
    deep = "[" * 300 + "]" * 300
    assert jsonfast.loads(deep) == json.loads(deep)
