"""The published OpenAPI document is generated from the app: every route is in it, each with the
body model its handler parses; request bodies are capped per operation."""

from __future__ import annotations

import inspect
import re
from typing import Any

from dettui.master.http import openapi
from tests.master.conftest import Api, allocate
from tests.master.test_api import create


async def test_every_route_is_published(api: Api) -> None:
    await api.call("GET", "/api/v1/openapi.json", headers={}, status=401)
    doc = await api.call("GET", "/api/v1/openapi.json")
    assert doc["openapi"].startswith("3.")
    published = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    routes = {(r.method, r.resource.canonical) for r in api.client.server.app.router.routes()
              if r.method != "HEAD" and r.resource is not None}
    assert published == routes
    login = doc["paths"]["/api/v1/auth/login"]["post"]
    assert login["security"] == [] and login["requestBody"]["content"]["application/json"][
        "schema"] == {"$ref": "#/components/schemas/LoginBody"}
    assert "username" in doc["components"]["schemas"]["LoginBody"]["properties"]
    metrics = doc["paths"]["/api/v1/trials/{id}/metrics"]["post"]
    assert {"allocation": []} in metrics["security"]
    assert metrics["parameters"][0]["schema"]["type"] == "integer"
    work = doc["paths"]["/api/v1/agents/{agentId}/work"]["get"]
    assert work["x-long-poll"] == "timeout_seconds"


def test_each_handler_declares_the_body_it_parses(api: Api) -> None:
    """A handler that calls `parse(request, Model)` declares `@op(body=Model)`, so the document
    cannot drift from the code."""
    checked = 0
    for route in api.client.server.app.router.routes():
        handler: Any = route.handler
        source = inspect.getsource(handler)
        parsed = re.findall(r"\bparse\(request, (\w+)\)", source)
        declared = openapi.op_of(handler).body
        if parsed:
            assert declared is not None and declared.__name__ == parsed[0], route
            checked += 1
        elif "read_json(request)" in source or "read_body(request)" in source:
            assert declared is not None, f"{route}: reads a body it does not declare"
    assert checked >= 15


async def test_bodies_are_capped_per_operation(api: Api) -> None:
    await create(api)
    _, token = await allocate(api, 1)  # the trial's own writer: refused only for the size
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    big = b'{"group": "training", "x": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    body = await api.call("POST", "/api/v1/trials/1/metrics", raw=big, status=413,
                          headers=task)
    # one metrics report's own cap (issue 29, attack 8), below the 16 MiB default
    assert "over the limit of 2,097,152 bytes for POST /api/v1/trials/{id}/metrics" in body[
        "message"]

    async def chunks() -> Any:  # no Content-Length: the cap holds while reading
        for _ in range(17):
            yield b"x" * (1024 * 1024)

    resp = await api.client.post("/api/v1/trials/1/metrics", data=chunks(), headers=task)
    assert resp.status == 413, await resp.text()
