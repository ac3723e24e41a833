"""The runtime's time is a clock passed in: a test moves it, and the liveness check and the
preemption timeout act on what it shows, with no sleeping. (What the master's own stalls do to
them is tests/master/test_stall.py's, on the real clock.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dettui.master.app import create_app
from dettui.master.clock import ManualClock
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import trials as trial_store
from dettui.models import AllocationState
from tests.master.conftest import Api, agent_headers
from tests.master.test_api import create
from tests.poll import until_async

AGENT_TIMEOUT = 20.0
PREEMPTION_TIMEOUT = 600.0


@pytest.fixture
async def running(master_settings: MasterSettings,
                  aiohttp_client: Any) -> tuple[Api, ManualClock, str, dict[str, str]]:
    """A master on a clock the test moves, one agent, and a trial running on it."""
    clock = ManualClock()
    settings = replace(master_settings, agent_timeout=AGENT_TIMEOUT,
                       preemption_timeout=PREEMPTION_TIMEOUT)
    client = await aiohttp_client(create_app(settings, clock))
    resp = await client.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    api = Api(client, (await resp.json())["token"])
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=agent)
    await create(api)

    async def started() -> list[Any]:
        return (await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=0.05",
                               headers=agent))["work"]

    work = await until_async(started, "the trial's start message")
    alloc_id = work[0]["allocationId"]
    await beat(api, agent, alloc_id)
    return api, clock, alloc_id, agent


async def beat(api: Api, agent: dict[str, str], alloc_id: str) -> None:
    await api.call("POST", "/api/v1/agents/a1/heartbeat", {"runningAllocations": [alloc_id]},
                   headers=agent)


async def test_an_agent_is_lost_when_the_clock_passes_its_timeout(
        running: tuple[Api, ManualClock, str, dict[str, str]]) -> None:
    api, clock, alloc_id, agent = running
    cluster, db = api.client.server.app[appkeys.CLUSTER], api.client.server.app[appkeys.DB]
    await clock.advance(AGENT_TIMEOUT - 1)  # silent, but not for long enough
    await cluster.agents.check()
    assert [a["id"] for a in (await api.call("GET", "/api/v1/agents"))["agents"]] == ["a1"]
    assert (await db.run(trial_store.allocation, alloc_id)).state is AllocationState.RUNNING
    await beat(api, agent, alloc_id)  # heard of again: the count starts over
    await clock.advance(AGENT_TIMEOUT - 1)
    await cluster.agents.check()
    assert (await db.run(trial_store.allocation, alloc_id)).state is AllocationState.RUNNING
    await clock.advance(2)  # now silent for longer than the timeout
    await cluster.agents.check()
    assert (await api.call("GET", "/api/v1/agents"))["agents"] == []
    alloc = await db.run(trial_store.allocation, alloc_id)
    assert alloc.state is AllocationState.EXITED and alloc.exit_reason == "lost"
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert trial["state"] == "STATE_QUEUED"  # back in the queue, to run elsewhere


async def test_a_preemption_not_acted_on_is_killed_when_the_clock_passes_its_timeout(
        running: tuple[Api, ManualClock, str, dict[str, str]]) -> None:
    api, clock, alloc_id, agent = running
    cluster, db = api.client.server.app[appkeys.CLUSTER], api.client.server.app[appkeys.DB]
    await cluster.dispatcher.run(trial_store.request_preempt, alloc_id)
    assert alloc_id in cluster.dispatcher.preempting
    for _ in range(int(PREEMPTION_TIMEOUT - 1) // 10):  # the agent is alive (it heartbeats);
        await beat(api, agent, alloc_id)  # the trial just does not stop
        await clock.advance(10)
    await clock.advance((PREEMPTION_TIMEOUT - 1) % 10)
    await beat(api, agent, alloc_id)
    await cluster.agents.check()
    assert not (await db.run(trial_store.allocation, alloc_id)).kill_requested
    await clock.advance(2)
    await beat(api, agent, alloc_id)
    await cluster.agents.check()
    alloc = await db.run(trial_store.allocation, alloc_id)
    assert alloc.kill_requested and alloc.state is AllocationState.TERMINATING
    work = (await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=0",
                           headers=agent))["work"]
    assert [(w["kind"], w["allocationId"]) for w in work] == [("kill", alloc_id)]
    assert "preemption timeout" in work[0]["reason"]
