"""A long trial log read a page at a time (the dashboard's logs screen): dettui's id cursors
`idBefore` and `idAfter` on Determined's logs route, with `limit` and `orderBy`. Many lines share
a timestamp (a burst of output), so a page boundary is an id, and no line is read twice or
skipped."""

from __future__ import annotations

import json
from typing import Any

from dettui.master.http import appkeys
from dettui.master.store import logs as log_store
from tests.master.conftest import Api
from tests.master.test_api import create

STAMP = 1_790_000_000.0


async def fill(api: Api, count: int, *, trial_id: int = 1) -> None:
    """`count` lines `line i` (rank i % 2, one timestamp) stored through the store."""
    run = api.client.server.app[appkeys.CLUSTER].dispatcher.run
    rows = [{"trial_id": trial_id, "task_id": "t", "rank_id": i % 2, "stdtype": "stdout",
             "source": "task", "timestamp": STAMP, "log": f"line {i}\n"} for i in range(count)]
    await run(log_store.insert, rows)


async def read(api: Api, query: str) -> list[dict[str, Any]]:
    resp = await api.client.get(f"/api/v1/trials/1/logs?{query}", headers=api.headers())
    assert resp.status == 200, await resp.text()
    return [json.loads(ln)["result"] for ln in (await resp.text()).splitlines()]


async def test_pages_back_from_the_tail_read_every_line_once(api: Api) -> None:
    await create(api)
    await fill(api, 2500)
    seen: list[str] = []
    before = ""
    for _ in range(4):
        page = await read(api, f"limit=1000&orderBy=ORDER_BY_DESC&follow=false{before}")
        if not page:
            break
        assert len(page) <= 1000
        ids = [int(p["id"]) for p in page]
        assert ids == sorted(ids, reverse=True)
        seen += [p["log"] for p in page]
        before = f"&idBefore={ids[-1]}"
    assert not page, "three pages hold it all"
    assert seen == [f"line {i}\n" for i in reversed(range(2500))]
    # The same by timestamp (Determined's own cursor) loses every line of the burst after
    # the first page: they share one timestamp.
    first = await read(api, "limit=1000&orderBy=ORDER_BY_DESC")
    assert await read(api, f"limit=1000&orderBy=ORDER_BY_DESC&timestampBefore="
                           f"{first[-1]['timestamp']}") == []


async def test_a_page_after_an_id_and_a_filtered_page_before_one(api: Api) -> None:
    await create(api)
    await fill(api, 50)
    ids = [int(p["id"]) for p in await read(api, "follow=false")]
    after = await read(api, f"idAfter={ids[39]}&limit=5")
    assert [p["log"] for p in after] == [f"line {i}\n" for i in range(40, 45)]
    rank1 = await read(api, f"rankIds=1&idBefore={ids[10]}&limit=3&orderBy=ORDER_BY_DESC")
    assert [p["log"] for p in rank1] == ["line 9\n", "line 7\n", "line 5\n"]
    # Between two ids, oldest first; a cursor before an id does not follow (it ends).
    between = await read(api, f"idAfter={ids[2]}&idBefore={ids[6]}&follow=true")
    assert [p["log"] for p in between] == [f"line {i}\n" for i in range(3, 6)]


async def test_follow_after_an_id_sends_only_newer_lines(api: Api) -> None:
    await create(api)
    await fill(api, 20)
    ids = [int(p["id"]) for p in await read(api, "follow=false")]
    resp = await api.client.get(f"/api/v1/trials/1/logs?follow=true&idAfter={ids[-3]}",
                                headers=api.headers())
    got = [json.loads(await resp.content.readline())["result"]["log"] for _ in range(2)]
    assert got == ["line 18\n", "line 19\n"]
    await fill(api, 1)  # a new line reaches the follower
    assert json.loads(await resp.content.readline())["result"]["log"] == "line 0\n"
    resp.close()
    await api.call("GET", "/api/v1/trials/1/logs?idBefore=x", status=400)
