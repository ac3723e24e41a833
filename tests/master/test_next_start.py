"""A trial's exit starts the next one on the freed slot at once: the exit report's commit kicks
the scheduler, whose pass allocates the next trial and answers the agent's waiting work
long-poll, with no timer in between (issue 34: exit -> next start within 20 ms)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dettui.master.cluster import scheduling
from tests.master.conftest import Api, agent_headers
from tests.master.test_api import create

SEARCH = """
name: next-start
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_trials: 4, max_concurrent_trials: 1}
hyperparameters:
  x: {type: double, minval: -1, maxval: 1}
max_restarts: 0
"""
HOUR = 3600.0


async def test_an_exit_starts_the_next_trial_without_waiting_on_a_timer(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every asyncio sleep of 5 ms or more lasts an hour here (a pause between scheduling
    passes, a poll interval): the trials still run one after another, each started by the
    exit of the one before. Passes over a big queue are paced (PACE_AFTER); this queue is
    not one, so that pacing is put out of reach."""
    monkeypatch.setattr(scheduling, "PACE_AFTER", float("inf"), raising=False)
    real_sleep = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        if delay >= 0.005:
            delay = HOUR
        return await real_sleep(delay, result)

    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=agent)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    exp_id = (await create(api, SEARCH))["experiment"]["id"]
    started: list[int] = []
    for _ in range(4):
        got = await asyncio.wait_for(api.call(
            "GET", f"/api/v1/agents/a1/work?timeout_seconds={HOUR}", headers=agent), 20)
        starts = [w for w in got["work"] if w["kind"] == "start"]
        assert len(starts) == 1, got
        started.append(starts[0]["trialId"])
        await api.call("POST", f"/api/v1/agents/a1/allocations/{starts[0]['allocationId']}"
                       "/exit", {"exitCode": 0, "reason": ""}, headers=agent)
    assert len(set(started)) == 4, started
    monkeypatch.undo()
    exp = (await api.call("GET", f"/api/v1/experiments/{exp_id}"))["experiment"]
    assert exp["state"] == "STATE_COMPLETED", exp
    assert len(exp["trialIds"]) == 4
