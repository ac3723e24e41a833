"""Creating an experiment with a large model definition: a body over offload.HOLD goes to the
worker process as it arrives (the master never holds it whole), the context comes back whole,
and a body cut off at its cap leaves the master and its workers in step."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
from collections.abc import AsyncIterator

from dettui.master import offload
from tests.master.conftest import SIMPLE_CONFIG, Api


def _files(content: bytes) -> list[dict[str, object]]:
    return [{"path": "train.py", "type": 48, "mtime": "1700000000", "mode": 33188, "uid": 0,
             "gid": 0, "content": base64.b64encode(b"print(1)\n").decode()},
            {"path": "weights.bin", "type": 48, "mtime": "1700000000", "mode": 33188, "uid": 0,
             "gid": 0, "content": base64.b64encode(content).decode()}]


async def test_a_long_create_body_streams_and_its_context_comes_back_whole(api: Api) -> None:
    content = os.urandom(18 * 1024 * 1024)  # incompressible: a context over a worker's BIG
    body = json.dumps({"config": SIMPLE_CONFIG, "modelDefinition": _files(content)}).encode()
    assert len(body) > offload.HOLD  # streamed, not held
    exp = (await api.call("POST", "/api/v1/experiments", raw=body))["experiment"]
    got = await api.call("GET", f"/api/v1/experiments/{exp['id']}/model_def")
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(got["b64Tgz"]))) as tar:
        member = tar.extractfile("weights.bin")
        assert member is not None and member.read() == content


async def test_a_create_body_over_its_cap_is_a_413_and_the_workers_stay_in_step(
        api: Api) -> None:
    head = json.dumps({"config": SIMPLE_CONFIG, "modelDefinition": _files(b"")})[:-3].encode()
    mib = b"A" * (1024 * 1024)

    async def endless() -> AsyncIterator[bytes]:  # no Content-Length: cut off while streaming
        yield head
        for _ in range(150):
            yield mib

    for _ in range(offload.PROCESSES + 1):
        resp = await api.client.post("/api/v1/experiments", data=endless(),
                                     headers=api.headers())
        assert resp.status == 413, await resp.text()
        assert "over the limit of 146,800,640 bytes" in (await resp.json())["message"]
    for _ in range(offload.PROCESSES * 2):
        await api.call("POST", "/api/v1/experiments",
                       {"config": SIMPLE_CONFIG, "modelDefinition": _files(b"w")})
