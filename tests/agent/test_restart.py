"""An agent that was killed and starts again never runs an allocation of its earlier run a
second time under the same id (its log sequence numbers and spool belong to the first run):
it reports it lost, and the trial gets a new allocation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from dettui.master.settings import MasterSettings
from tests.master.conftest import Api, agent_headers
from tests.master.conftest import api as api  # noqa: F401 - the fixture
from tests.master.test_api import create

pytestmark = pytest.mark.both_ways  # trials forked and fresh (conftest)


@pytest.fixture
def master_settings(tmp_path: Path) -> MasterSettings:
    """The `api` fixture's master, on SQLite (the agent's side is what is tested here)."""
    return MasterSettings(state_dir=tmp_path / "state", port=0)


async def _trial(api: Api) -> dict[str, Any]:
    return dict((await api.call("GET", "/api/v1/experiments/1/trials"))["trials"][0])


async def _allocations(api: Api) -> list[Any]:
    from dettui.master.http import appkeys
    from dettui.master.store import trials as trial_store

    db = api.client.server.app[appkeys.DB]
    return list(await db.run(trial_store.allocations_for_trial, 1))


async def test_a_restarted_agent_reports_its_earlier_runs_allocation_lost(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dettui.agent import agent as agent_mod
    from dettui.agent import process
    from dettui.client import Client

    monkeypatch.setattr(process, "become_subreaper", lambda: False)  # not the test runner
    headers = await agent_headers(api)
    # The agent's first run: it registers and takes the start, then dies (SIGKILL) before a
    # heartbeat told the master the allocation runs: it is still ASSIGNED.
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=headers)
    await create(api)
    work: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while not work and time.monotonic() < deadline:
        work = (await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=1",
                               headers=headers))["work"]
    (start,) = work
    first = start["allocationId"]
    work_root = tmp_path / "work"
    (work_root / agent_mod.STARTED).mkdir(parents=True)
    (work_root / agent_mod.STARTED / first).touch()  # what the first run left

    url = str(api.client.make_url("")).rstrip("/")
    token = headers["Authorization"].removeprefix("Bearer ")
    agent = agent_mod.Agent(agent_mod.AgentOptions(url, "a1", cpu_slots=1,
                                                   work_root=work_root), Client(url, token))
    running = asyncio.create_task(agent.run())
    try:
        deadline = time.monotonic() + 30
        while (await _trial(api))["state"] != "STATE_COMPLETED":
            assert time.monotonic() < deadline, (await _allocations(api), await _trial(api))
            await asyncio.sleep(0.1)
    finally:
        agent.stop()
        await asyncio.wait_for(running, 30)
    allocs = await _allocations(api)  # read after the trial ended: both have exited
    assert len(allocs) == 2, allocs
    lost, second = allocs[0], allocs[1]
    assert lost.id == first and lost.exit_reason == "lost", lost
    assert second.id != first and second.exit_code == 0
    trial = await _trial(api)
    assert trial["restarts"] == 0  # a lost agent is not the trial's fault
    assert not list((work_root / agent_mod.STARTED).iterdir())  # every exit was reported
