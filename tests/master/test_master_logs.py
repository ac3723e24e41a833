"""`det master logs` against a ring full of long lines: a 404's log line quotes a capped client
name, the ring keeps a bounded amount of text, and answers are streamed in chunks so the master
keeps answering other requests while several are read; `--tail N` (offset -N), limit and `-f`
behave as Determined's."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

from dettui.master import master_log
from dettui.master.http import appkeys
from tests.master.conftest import Api

LONG = "é" * 400  # a hostile User-Agent, or any long non-ASCII line
READERS = 8
NO_HANG = 2.0  # seconds: /info took 3-5 s here when each answer was built in one piece


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the log ring is the master's memory, not its store


def _fill(buffer: master_log.MasterLog, count: int = master_log.MAX_ENTRIES) -> None:
    for n in range(count):
        buffer.handle(logging.makeLogRecord({"name": "flood", "msg": f"{n} {LONG}",
                                             "levelno": logging.INFO}))


def _entries(text: str) -> list[dict[str, Any]]:
    return [json.loads(x)["result"]["logEntry"] for x in text.splitlines()]


async def _get(api: Api, query: str) -> list[dict[str, Any]]:
    resp = await api.client.get(f"/api/v1/master/logs?{query}", headers=api.headers())
    assert resp.status == 200
    return _entries(await resp.text())


async def test_a_404_line_quotes_a_capped_path_and_client(api: Api,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)  # as `dettui serve` logs
    buffer = api.client.server.app[appkeys.MASTER_LOG]
    resp = await api.client.get("/api/v1/nope/" + "x" * 400,
                                headers={**api.headers(), "User-Agent": LONG})
    assert resp.status == 404
    (line,) = [e for e in buffer.entries(-5) if " 404 GET /api/v1/nope/" in e.message]
    assert len(line.message) <= 400, line.message
    assert line.message.endswith("...)") and "\\xe9" in line.message


async def test_the_ring_keeps_a_bounded_amount_of_text() -> None:
    buffer = master_log.MasterLog()
    _fill(buffer)
    kept = buffer.entries()
    assert sum(len(e.message) for e in kept) <= master_log.MAX_KEPT_CHARS
    assert kept[-1].id == master_log.MAX_ENTRIES - 1  # the newest are kept, the oldest go
    assert [e.id for e in kept] == list(range(kept[0].id, kept[-1].id + 1))


async def test_info_answers_while_full_logs_are_read(api: Api) -> None:
    buffer = api.client.server.app[appkeys.MASTER_LOG]
    _fill(buffer)
    last = buffer.last_id()

    async def read_all() -> bytes:
        resp = await api.client.get("/api/v1/master/logs", headers=api.headers())
        assert resp.status == 200
        return await resp.read()  # parsed once all are read: this loop is the master's too

    readers = [asyncio.create_task(read_all()) for _ in range(READERS)]
    waits = []
    while not all(r.done() for r in readers):
        start = time.monotonic()
        info = await api.client.get("/info")
        assert info.status == 200
        waits.append(time.monotonic() - start)
    answers = [_entries(body.decode()) for body in await asyncio.gather(*readers)]
    print(f"/info while {READERS} full logs answers were read: max {max(waits):.3f} s, "
          f"{len(waits)} calls")
    assert max(waits) < NO_HANG, waits
    for got in answers:  # each answer is the whole ring as kept, newest last, none cut
        assert got[-1]["id"] >= last and len(got) == len(answers[0])
        assert [e["id"] for e in got] == list(range(got[0]["id"], got[-1]["id"] + 1))
        assert got[-1]["message"].endswith(LONG) and got[-1]["level"] == "LOG_LEVEL_INFO"


async def test_tail_limit_and_follow_as_determined(api: Api) -> None:
    buffer = api.client.server.app[appkeys.MASTER_LOG]
    _fill(buffer, 50)
    last = buffer.last_id()
    tail = await _get(api, "offset=-5")
    assert [e["id"] for e in tail] == list(range(last - 4, last + 1))
    some = await _get(api, "offset=-10&limit=3")
    assert [e["id"] for e in some] == list(range(last - 9, last - 6))
    await api.call("GET", "/api/v1/master/logs?follow=true&limit=3", status=400)

    resp = await api.client.get("/api/v1/master/logs?follow=true&offset=-1",
                                headers=api.headers())
    first = json.loads(await resp.content.readline())["result"]["logEntry"]
    assert first["id"] == last
    buffer.handle(logging.makeLogRecord({"name": "flood", "msg": "a followed line",
                                         "levelno": logging.WARNING}))
    followed = json.loads(await asyncio.wait_for(resp.content.readline(), 30))
    assert followed["result"]["logEntry"]["message"] == "flood: a followed line"
    resp.close()
