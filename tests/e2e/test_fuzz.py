"""Property-based fuzzing of every operation of the master's published OpenAPI document, against a
real `dettui serve`: valid and invalid bodies (from the operation's schema, arbitrary JSON, raw
bytes), ids and query strings, as an admin, a plain user, an agent, a trial's allocation and
nobody.

Every answer must be below 500 and arrive within 5 s, and the master's memory must stay bounded.
Examples are derandomized (the same in every run) and bounded per operation.

Hostile numbers and strings (issue 29, attack 5) go everywhere a number or a string may: NaN,
±Infinity, 1e999, ±2^63, ±2^64 and booleans where the schema says integer or number, lone
UTF-16 surrogates in strings, ids past 64 bits in paths and queries. The random examples draw
them among others; `test_hostile_numbers_no_5xx` sends each of them to every operation.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dettui.master.app import create_app
from dettui.master.http import openapi
from dettui.master.http.middleware import PUBLIC, TASK_HANDLERS
from dettui.master.settings import MasterSettings
from tests.conftest import Served

pytestmark = pytest.mark.xdist_group("fuzz")  # one master for the module: the last test reads
# what every operation's fuzzing did to it

EXAMPLES = int(os.environ.get("DETTUI_FUZZ_EXAMPLES", "40"))  # per operation
DERANDOMIZE = "DETTUI_FUZZ_EXAMPLES" not in os.environ  # exploring: new examples each run
SLOW = 5.0  # seconds: an answer later than this is a hang
SPEC = openapi.spec(create_app(MasterSettings(state_dir=Path("/nonexistent"))), PUBLIC,
                    TASK_HANDLERS)
OPERATIONS = [(method.upper(), path, o) for path, ops in SPEC["paths"].items()
              for method, o in ops.items()]
CONFIG = """
name: fuzz
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
"""


@dataclass
class World:
    """The master, its credentials, and real ids to aim at."""

    served: Served
    tokens: dict[str, str | None] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)
    requests: int = 0
    server_errors: list[str] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)
    rss_before: int = 0


def login(url: str, username: str) -> str:
    req = urllib.request.Request(url + "/api/v1/auth/login", method="POST", data=json.dumps(
        {"username": username, "password": ""}).encode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(json.loads(resp.read())["token"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("fuzz")
    served = Served(tmp / "state", tmp / "config", extra=["--no-agent"])
    served.start()
    w = World(served)
    try:
        admin, user = login(served.url, "admin"), login(served.url, "determined")
        agent = served.agent_token("fuzz")
        w.tokens = {"admin": admin, "user": user, "agent": agent, "none": None}
        exp = served.api("POST", "/api/v1/experiments", {"config": CONFIG, "activate": True,
                                                         "modelDefinition": []})["experiment"]
        call_json(served.url, "POST", "/api/v1/agents/register", agent, {
            "id": "fuzz-agent", "slots": [{"id": 0, "type": "cpu"}]})
        work: list[dict[str, Any]] = []
        for _ in range(50):
            work = call_json(served.url, "GET",
                             "/api/v1/agents/fuzz-agent/work?timeout_seconds=0.2", agent)["work"]
            if work:
                break
        start = work[0]
        w.tokens["allocation"] = start["sessionToken"]
        w.ids = {"id": ["1", str(exp["id"]), str(start["trialId"])],
                 "agentId": ["fuzz-agent"], "allocationId": [start["allocationId"]],
                 "taskId": [start["taskId"]], "username": ["determined", "admin"],
                 "uuid": ["00000000-0000-4000-8000-000000000001"], "externalId": ["ext-1"]}
        w.rss_before = psutil.Process(served.proc.pid).memory_info().rss  # type: ignore[union-attr]
        yield w
    finally:
        served.stop()


def call_json(url: str, method: str, path: str, token: str, body: Any = None) -> Any:
    req = urllib.request.Request(url + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


# --- strategies ------------------------------------------------------------------------------

OVERFLOW = "\x00overflow"  # stands for 1e999 (a number past a double) until `dump`
HOSTILE_NUMBERS: list[Any] = [math.nan, math.inf, -math.inf, OVERFLOW, 2**63, -(2**63) - 1,
                              2**64, -(2**64), True, False]
LONE_SURROGATES = ["\ud800", "a\udc00b", "\udbff"]
HOSTILE_IDS = [str(2**63), str(2**64), "99999999999999999999", "-1", "1e999", "NaN"]
JUNK_TEXT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40),
    st.sampled_from(LONE_SURROGATES))
JUNK = st.one_of(
    JUNK_TEXT, st.sampled_from(["nan", "NaN", "inf", "-1", "+1", " 1", "١", "1e400", "0x10",
                                "99999999999999999999999", "-99999999999999999999", "",
                                "../../etc", "%2e%2e%2f", "[/]", "true", "Infinity", "1e999",
                                str(2**63), str(-(2**63) - 1), str(2**64)]))
NUMBER = st.one_of(st.integers(), st.floats(allow_nan=False), st.sampled_from(HOSTILE_NUMBERS))
JSON = st.recursive(
    st.none() | st.booleans() | NUMBER | JUNK_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(JUNK_TEXT, inner, max_size=4),
    max_leaves=12)


def dump(value: Any) -> bytes:
    """`value` as JSON text the way a hostile client writes it: NaN and Infinity as Python's
    tokens, OVERFLOW as 1e999, lone surrogates as `\\ud800` escapes."""
    return json.dumps(value).replace(json.dumps(OVERFLOW), "1e999").encode()


def path_value(w: World, name: str) -> st.SearchStrategy[str]:
    known = w.ids.get(name, [])
    junk = st.one_of(JUNK, st.integers().map(str), st.sampled_from(HOSTILE_IDS)) \
        if name == "id" else JUNK
    return st.one_of(st.sampled_from(known), junk) if known else junk


def query_value(schema: dict[str, Any], poll: bool, name: str) -> st.SearchStrategy[Any]:
    kind = schema.get("type")
    if poll and name == "follow":  # following a log is a long-poll by design: never "true"
        return st.sampled_from(["false", "no", "junk"])
    if poll:  # a long-poll waits as long as it is asked to: ask for at most a second
        return st.one_of(st.floats(0, 1).map(lambda f: f"{f:.3f}"), JUNK.filter(_not_a_wait))
    if kind == "array":
        return st.lists(query_value(schema["items"], False, name), max_size=3)
    typed = {"integer": st.one_of(st.integers(-2, 10**6).map(str), st.sampled_from(HOSTILE_IDS)),
             "number": st.floats().map(str),
             "boolean": st.sampled_from(["true", "false"])}.get(kind, JUNK)
    return st.one_of(typed, JUNK)


def _not_a_wait(text: str) -> bool:
    """Junk for a timeout that the master could read as a wait longer than a second (an empty
    value asks for the default wait, 60 s for the preemption long-poll)."""
    if not text:
        return False
    try:
        return not float(text) > 1
    except ValueError:
        return True


def body_value(o: dict[str, Any]) -> st.SearchStrategy[bytes | None]:
    schema = o.get("requestBody", {}).get("content", {}).get("application/json", {}).get(
        "schema")
    options: list[st.SearchStrategy[bytes | None]] = [
        st.none(), JSON.map(dump),
        st.binary(max_size=64), st.just(b"[" * 5000 + b"]" * 5000)]
    if schema is not None:
        options.append(valid(schema).map(dump))
    return st.one_of(options)


def valid(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of the JSON schemas pydantic writes (objects, scalars, arrays, anyOf, $ref into
    the document's components)."""
    if "$ref" in schema:
        return valid(SPEC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]], depth)
    if "anyOf" in schema:
        return st.one_of([valid(s, depth) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object" and "properties" in schema and depth < 4:
        required = set(schema.get("required", []))
        props = {k: valid(v, depth + 1) for k, v in schema["properties"].items()}
        return st.fixed_dictionaries({k: v for k, v in props.items() if k in required},
                                     optional={k: v for k, v in props.items()
                                               if k not in required})
    if kind == "object":
        extra = schema.get("additionalProperties")
        inner = valid(extra, depth + 1) if isinstance(extra, dict) and depth < 4 else JSON
        return st.dictionaries(JUNK_TEXT, inner, max_size=3)
    if kind == "array":
        items = schema.get("items")
        inner = valid(items, depth + 1) if isinstance(items, dict) and depth < 4 else JSON
        return st.lists(inner, max_size=3)
    hostile = st.sampled_from(HOSTILE_NUMBERS)
    return {"string": JUNK_TEXT, "integer": st.one_of(st.integers(-2, 10**9), hostile),
            "boolean": st.booleans(),
            "number": st.one_of(st.floats(allow_nan=False, allow_infinity=False), hostile),
            "null": st.none()}.get(kind, JSON)


@st.composite
def requests(draw: st.DrawFn, w: World, method: str, path: str,
             o: dict[str, Any]) -> tuple[str, bytes | None, str]:
    poll = o.get("x-long-poll")
    url = path
    for p in o["parameters"]:
        if p["in"] == "path":
            value = draw(path_value(w, p["name"]))
            url = url.replace("{" + p["name"] + "}",
                              urllib.parse.quote(value, safe="", errors="surrogatepass"))
    query = []
    for p in o["parameters"]:
        if p["in"] == "query" and draw(st.booleans()):
            value = draw(query_value(p["schema"], p["name"] == poll, p["name"]))
            for v in value if isinstance(value, list) else [value]:
                query.append((p["name"], v))
    if poll and not any(name == poll for name, _ in query) and poll != "follow":
        query.append((poll, "0"))  # a long-poll asked for nothing waits its default
    if query:
        url += "?" + urllib.parse.urlencode(query, errors="surrogatepass")
    who = draw(st.sampled_from(sorted(w.tokens)))
    return url, draw(body_value(o)) if method != "GET" else None, who


# --- the test --------------------------------------------------------------------------------


def send(w: World, method: str, url: str, body: bytes | None, who: str) -> None:
    if (who != "none" and (url.startswith("/api/v1/auth/logout")
                           or url.endswith("/password"))):
        who = "none"  # keep the fuzz's own credentials working
    token = w.tokens[who]
    headers = {}
    if who == "allocation":
        headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {token}"
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(w.served.url + url, method=method, data=body, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=SLOW * 3) as resp:
            status = resp.status
            resp.read()
    except urllib.error.HTTPError as exc:
        status = exc.code
        exc.read()
    took = time.monotonic() - started
    w.requests += 1
    what = f"{who} {method} {url[:200]} body={body[:120] if body else body!r}"
    if status >= 500:
        w.server_errors.append(f"{status} {what}")
    if took > SLOW:
        w.slow.append(f"{took:.1f}s {what}")


@pytest.mark.parametrize(("method", "path", "o"), OPERATIONS,
                         ids=[f"{m} {p}" for m, p, _ in OPERATIONS])
def test_no_5xx_no_hang(world: World, method: str, path: str, o: dict[str, Any]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE, database=None,
              suppress_health_check=list(HealthCheck))
    @given(requests(world, method, path, o))
    def fuzz(request: tuple[str, bytes | None, str]) -> None:
        send(world, method, *request)

    before = (len(world.server_errors), len(world.slow))
    fuzz()
    assert (len(world.server_errors), len(world.slow)) == before, (
        world.server_errors[before[0]:][:5], world.slow[before[1]:][:5])


def fill(schema: dict[str, Any], number: Any, text: str | None, used: list[bool],
         depth: int = 0) -> Any:
    """A body of `schema` with every property given, `number` in every integer or number
    field (1 if None), `text` in every string field ("x" if None); `used` is set when one was
    put in."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return fill(SPEC["components"]["schemas"][name], number, text, used, depth)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"] or schema["anyOf"]
        return fill(options[0], number, text, used, depth)
    kind = schema.get("type")
    if kind in ("integer", "number") or (kind == "string" and text is not None):
        used.append(True)
        return (number if number is not None else 1) if kind != "string" else text
    if kind == "object" and depth < 4:
        props = schema.get("properties", {})
        return {k: fill(v, number, text, used, depth + 1) for k, v in props.items()}
    if kind == "array" and isinstance(schema.get("items"), dict) and depth < 4:
        return [fill(schema["items"], number, text, used, depth + 1)]
    return {"string": "x", "boolean": True, "null": None}.get(kind, "x")


def hostile_requests(w: World, o: dict[str, Any]) -> Iterator[tuple[str | None, bytes | None]]:
    """(path values or query, body) of each hostile request for an operation: each hostile
    number in every numeric field of its body, lone surrogates in every string field, ids past
    64 bits in its path, hostile numbers in its numeric query parameters."""
    schema = o.get("requestBody", {}).get("content", {}).get("application/json", {}).get(
        "schema")
    for number in ([*HOSTILE_NUMBERS, None] if schema is not None else []):
        used: list[bool] = []
        body = fill(schema, number, LONE_SURROGATES[0] if number is None else None, used)
        if used:
            yield None, dump(body)
    path_params = [p["name"] for p in o["parameters"] if p["in"] == "path"]
    numeric = [p["name"] for p in o["parameters"] if p["in"] == "query"
               and p["schema"].get("type") in ("integer", "number")
               and p["name"] != o.get("x-long-poll")]
    for value in HOSTILE_IDS:
        if path_params:
            yield f"path:{value}", None
        if numeric:
            yield "?" + urllib.parse.urlencode([(n, value) for n in numeric]), None


@pytest.mark.parametrize(("method", "path", "o"), OPERATIONS,
                         ids=[f"{m} {p}" for m, p, _ in OPERATIONS])
def test_hostile_numbers_no_5xx(world: World, method: str, path: str, o: dict[str, Any]) -> None:
    """Every hostile number and string of issue 29's attack 5, in every operation (as an admin,
    a trial's allocation and an agent): a 4xx, never a 5xx."""
    before = len(world.server_errors)
    poll = o.get("x-long-poll")
    for where, body in hostile_requests(world, o):
        url = path
        for p in o["parameters"]:
            if p["in"] == "path":
                known = world.ids.get(p["name"], ["1"])[0]
                value = where[5:] if where and where.startswith("path:") else known
                url = url.replace("{" + p["name"] + "}", urllib.parse.quote(value, safe=""))
        query = where if where and where.startswith("?") else ""
        if poll:
            query += ("&" if query else "?") + f"{poll}=" + ("false" if poll == "follow" else "0")
        for who in ("admin", "allocation", "agent"):
            send(world, method, url + query, body if method != "GET" else None, who)
    assert len(world.server_errors) == before, world.server_errors[before:][:5]


def test_zz_the_master_stayed_small_and_up(world: World) -> None:
    """After every operation was fuzzed (this runs last in the module)."""
    assert world.requests >= len(OPERATIONS) * 5
    proc = psutil.Process(world.served.proc.pid)  # type: ignore[union-attr]
    grown = proc.memory_info().rss - world.rss_before
    assert grown < 300 * 1024 * 1024, f"the master grew by {grown / 2**20:.0f} MiB"
    assert call_json(world.served.url, "GET", "/api/v1/master", world.tokens["user"] or "",
                     None)["version"]
    print(f"\nfuzz: {len(OPERATIONS)} operations, {world.requests} requests, "
          f"{len(world.server_errors)} 5xx, {len(world.slow)} over {SLOW:.0f} s, "
          f"master RSS +{grown / 2**20:.0f} MiB")
