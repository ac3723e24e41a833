"""Guarded transitions: a store command refuses a change that a command committed since its
caller read the state has made wrong (a start of a trial just paused, a kill of an allocation
that has exited), and its caller then sends nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dettui.master import keys
from dettui.master.store import control
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.models import ExperimentState, TrialState
from tests.master.conftest import TEST_MINT, Api, agent_headers
from tests.master.test_api import create
from tests.master.test_store import _trial

STOPS = [ExperimentState.PAUSED, ExperimentState.STOPPING_CANCELED,
         ExperimentState.STOPPING_KILLED]


def _stopped_trial(conn: sqlite3.Connection, trial_id: int, how: ExperimentState | None) -> None:
    """The experiment stopped `how` (None: only the trial was killed) after a pass read it."""
    if how is None:
        control.kill_trial(conn, trial_id)
    else:
        control.stop(conn, trial_store.get(conn, trial_id).experiment_id, how)


@pytest.mark.parametrize("how", [*STOPS, None], ids=[*(s.short for s in STOPS), "trial-kill"])
def test_a_trial_stopped_after_the_pass_read_it_is_not_allocated(
        tmp_path: Path, how: ExperimentState | None) -> None:
    conn, trial_id = _trial(tmp_path)
    _stopped_trial(conn, trial_id, how)
    before = trial_store.get(conn, trial_id)
    assert trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT) is None
    assert trial_store.get(conn, trial_id) == before  # run id and state untouched
    assert trial_store.allocations_for_trial(conn, trial_id) == []
    assert trial_store.live_allocations(conn) == []


def test_a_queued_trial_of_an_active_experiment_is_allocated_once(tmp_path: Path) -> None:
    conn, trial_id = _trial(tmp_path)
    alloc = trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None and alloc.run_id == 1
    assert trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT) is None
    assert [a.id for a in trial_store.live_allocations(conn)] == [alloc.id]


async def _work(api: Api, agent: dict[str, str]) -> list[dict[str, Any]]:
    got = await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=0", headers=agent)
    return list(got["work"])


async def test_a_pause_between_the_pass_reading_the_queue_and_starting_sends_nothing(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pause lands while the scheduling pass awaits the store, after it read the queue: the
    pass starts nothing and plans again; activating starts the trial as usual."""
    app = api.client.server.app
    scheduling = app[keys.CLUSTER].scheduling
    running, start = scheduling._running, scheduling._start
    started: list[bool] = []
    done = asyncio.Event()

    async def pause_first(*args: Any) -> Any:
        if not started:
            await api.call("POST", "/api/v1/experiments/1/pause")
        return await running(*args)

    async def record(*args: Any) -> bool:
        started.append(await start(*args))
        done.set()
        return started[-1]

    monkeypatch.setattr(scheduling, "_running", pause_first)
    monkeypatch.setattr(scheduling, "_start", record)
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=agent)
    await create(api)
    await asyncio.wait_for(done.wait(), 10)
    db = app[keys.DB]
    assert started == [False]
    assert (await db.run(exp_store.get, 1)).state is ExperimentState.PAUSED
    assert (await db.run(trial_store.get, 1)).state is TrialState.PAUSED
    assert await db.run(trial_store.allocations_for_trial, 1) == []
    assert await _work(api, agent) == []

    done.clear()
    await api.call("POST", "/api/v1/experiments/1/activate")
    await asyncio.wait_for(done.wait(), 10)
    assert started == [False, True]
    assert [w["kind"] for w in await _work(api, agent)] == ["start"]
