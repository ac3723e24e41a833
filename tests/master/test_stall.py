"""A slow master never declares healthy agents lost: silence is measured with the master's own
stalls (event loop or store thread) taken out. Before, a config that froze the loop for 61 s
made the liveness check restart every running trial."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest

from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import trials as trial_store
from dettui.models import AllocationState
from tests.master.conftest import Api, agent_headers
from tests.master.test_api import create

TIMEOUT = 1.0  # the agent timeout of these masters
AGENT: dict[str, str] = {}  # the agent credential's headers


@pytest.fixture
async def running(master_settings: MasterSettings, aiohttp_client: Any) -> tuple[Api, str]:
    """A master with a 1 s agent timeout, one agent, and a trial running on it."""
    settings = replace(master_settings, agent_timeout=TIMEOUT)
    client = await aiohttp_client(create_app(settings))
    resp = await client.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    api = Api(client, (await resp.json())["token"])
    AGENT.update(await agent_headers(api))
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=AGENT)
    await create(api)
    for _ in range(100):
        work = await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=0.1",
                              headers=AGENT)
        if work["work"]:
            break
    alloc_id = work["work"][0]["allocationId"]
    await beat(api, alloc_id)
    return api, alloc_id


async def beat(api: Api, alloc_id: str) -> None:
    await api.call("POST", "/api/v1/agents/a1/heartbeat", {"runningAllocations": [alloc_id]},
                   headers=AGENT)


async def still_running(api: Api, alloc_id: str) -> bool:
    db = api.client.server.app[appkeys.DB]
    alloc = await db.run(trial_store.allocation, alloc_id)
    agents = [a["id"] for a in (await api.call("GET", "/api/v1/agents"))["agents"]]
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    return (alloc.state is AllocationState.RUNNING and agents == ["a1"]
            and trial["restarts"] == 0 and trial["state"] == "STATE_RUNNING")


async def test_a_stalled_event_loop_loses_no_agent(running: tuple[Api, str]) -> None:
    api, alloc_id = running
    assert await still_running(api, alloc_id)
    time.sleep(TIMEOUT * 2.5)  # the loop is stuck: no heartbeat can be taken in meanwhile
    await asyncio.sleep(0.6)  # the liveness check runs before the agent's next heartbeat
    await beat(api, alloc_id)
    await asyncio.sleep(0.3)
    assert await still_running(api, alloc_id)


async def test_a_stalled_store_thread_loses_no_agent(running: tuple[Api, str]) -> None:
    api, alloc_id = running
    db = api.client.server.app[appkeys.DB]
    stall = asyncio.ensure_future(db.call(time.sleep, TIMEOUT * 2.5))
    beats = [asyncio.ensure_future(beat(api, alloc_id))]  # held up behind the store
    while not stall.done():
        await asyncio.sleep(0.3)
        beats.append(asyncio.ensure_future(beat(api, alloc_id)))
    await asyncio.gather(*beats)
    await asyncio.sleep(0.5)
    assert await still_running(api, alloc_id)


async def test_an_agent_that_is_really_silent_is_still_lost(running: tuple[Api, str]) -> None:
    api, alloc_id = running
    await asyncio.sleep(TIMEOUT * 2.5)  # the loop runs; the agent says nothing
    db = api.client.server.app[appkeys.DB]
    assert (await db.run(trial_store.allocation, alloc_id)).state is AllocationState.EXITED
    assert (await api.call("GET", "/api/v1/agents"))["agents"] == []
