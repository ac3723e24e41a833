"""Guarded transitions: a store command refuses a change that a command committed since its
caller read the state has made wrong (a start of a trial just paused, a kill of an allocation
that has exited), and its caller then sends nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dettui.master.http import appkeys
from dettui.master.store import control, exits
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.models import AllocationState, ExperimentState, TrialState
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
        store_target: Path | str, how: ExperimentState | None) -> None:
    conn, trial_id = _trial(store_target)
    _stopped_trial(conn, trial_id, how)
    before = trial_store.get(conn, trial_id)
    assert trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT) is None
    assert trial_store.get(conn, trial_id) == before  # run id and state untouched
    assert trial_store.allocations_for_trial(conn, trial_id) == []
    assert trial_store.live_allocations(conn) == []


def test_a_queued_trial_of_an_active_experiment_is_allocated_once(store_target: Path | str) -> None:
    conn, trial_id = _trial(store_target)
    alloc = trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None and alloc.run_id == 1
    assert trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT) is None
    assert [a.id for a in trial_store.live_allocations(conn)] == [alloc.id]


async def _work(api: Api, agent: dict[str, str]) -> list[dict[str, Any]]:
    got = await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=0", headers=agent)
    return list(got["work"])


async def test_a_pause_between_the_pass_reading_the_queue_and_starting_sends_nothing(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pause lands after the scheduling pass read the queue and planned, before it starts
    the trial: the pass starts nothing and plans again; activating starts the trial as usual."""
    app = api.client.server.app
    scheduling = app[appkeys.CLUSTER].scheduling
    start = scheduling._start
    started: list[int] = []
    done = asyncio.Event()

    async def pause_first(*args: Any) -> int:
        if not started:
            await api.call("POST", "/api/v1/experiments/1/pause")
        started.append(await start(*args))
        done.set()
        return started[-1]

    monkeypatch.setattr(scheduling, "_start", pause_first)
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=agent)
    await create(api)
    await asyncio.wait_for(done.wait(), 10)
    db = app[appkeys.DB]
    assert started == [0]
    assert (await db.run(exp_store.get, 1)).state is ExperimentState.PAUSED
    assert (await db.run(trial_store.get, 1)).state is TrialState.PAUSED
    assert await db.run(trial_store.allocations_for_trial, 1) == []
    assert await _work(api, agent) == []

    done.clear()
    await api.call("POST", "/api/v1/experiments/1/activate")
    await asyncio.wait_for(done.wait(), 10)
    assert started == [0, 1]
    assert [w["kind"] for w in await _work(api, agent)] == ["start"]


# --- transitions of a live allocation -------------------------------------------------------

def _exited(conn: sqlite3.Connection, trial_id: int) -> str:
    alloc = trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None
    exits.end(conn, alloc.id, 0, "")
    return alloc.id


COMMANDS = {  # each named command, and the allocation fields it sets when it changes one
    "request_kill": (lambda c, a: trial_store.request_kill(c, a, "killed"),
                     {"kill_requested": True,
                                                "state": AllocationState.TERMINATING}),
    "request_preempt": (trial_store.request_preempt, {"preempt_requested": True}),
    "ack_preempt": (trial_store.ack_preempt, {"preempt_acked": True}),
    "mark_running": (trial_store.mark_running, {"state": AllocationState.RUNNING}),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_an_exited_allocation_stays_exited(store_target: Path | str, name: str) -> None:
    conn, trial_id = _trial(store_target)
    alloc_id = _exited(conn, trial_id)
    before = trial_store.allocation(conn, alloc_id)
    command, _ = COMMANDS[name]
    assert not command(conn, alloc_id)
    assert trial_store.allocation(conn, alloc_id) == before
    assert trial_store.live_allocations(conn) == []
    assert not exits.end(conn, alloc_id, 1, "again")  # ended once, not twice: no effects


@pytest.mark.parametrize("name", COMMANDS)
def test_a_live_allocation_changes(store_target: Path | str, name: str) -> None:
    conn, trial_id = _trial(store_target)
    alloc = trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None
    command, sets = COMMANDS[name]
    command(conn, alloc.id)
    after = trial_store.allocation(conn, alloc.id)
    assert {k: getattr(after, k) for k in sets} == sets


def test_a_killed_allocation_is_not_marked_running(store_target: Path | str) -> None:
    """The agent's heartbeat read ASSIGNED, a kill committed, then `mark_running`: the kill
    stands."""
    conn, trial_id = _trial(store_target)
    alloc = trial_store.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None and trial_store.request_kill(conn, alloc.id, "killed").kills
    assert not trial_store.mark_running(conn, alloc.id)
    assert trial_store.allocation(conn, alloc.id).state is AllocationState.TERMINATING


async def test_a_kill_or_preemption_of_an_exited_allocation_sends_nothing(api: Api) -> None:
    """The drain and the preemption timeout decide on a read, then act: an exit committed in
    between leaves the allocation exited, its trial as it ended, and no message to send."""
    app = api.client.server.app
    cluster, db = app[appkeys.CLUSTER], app[appkeys.DB]
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": []},
        headers=agent)
    await create(api)
    for _ in range(200):  # the scheduling pass starts the trial on a1
        if live := await db.run(trial_store.live_allocations):
            break
        await asyncio.sleep(0.02)
    got: list[str] = []
    for _ in range(200):  # the start message follows the allocation's commit
        got += [w["kind"] for w in await _work(api, agent)]
        if got:
            break
        await asyncio.sleep(0.02)
    assert got == ["start"]
    await cluster.dispatcher.run(exits.end, live[0].id, 0, "")
    ended = await db.run(trial_store.get, 1)
    assert ended.state is TrialState.COMPLETED
    await cluster.dispatcher.run(trial_store.request_kill, live[0].id, "the master is stopping")
    await cluster.dispatcher.run(trial_store.request_preempt, live[0].id)
    assert (await db.run(trial_store.allocation, live[0].id)).state is AllocationState.EXITED
    assert await db.run(trial_store.get, 1) == ended
    assert cluster.dispatcher.preempting == {}
    assert await _work(api, agent) == []


async def test_the_store_refuses_what_the_transition_table_does_not_allow(api: Api) -> None:
    """A killed experiment cannot be paused or activated back (it was set PAUSED before the
    table: a kill undone by a click), and an ended one cannot be paused or activated: one
    rule, in the store's commands, whatever the route."""
    from tests.master.conftest import allocate

    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "agent-x", "slots": [], "runningAllocations": []}, headers=agent)
    exp_id = (await create(api))["experiment"]["id"]
    await allocate(api, 1)  # a trial running on a connected agent: the kill waits for its exit
    await api.call("POST", f"/api/v1/experiments/{exp_id}/kill")
    exp = (await api.call("GET", f"/api/v1/experiments/{exp_id}"))["experiment"]
    assert exp["state"] == "STATE_STOPPING_KILLED"
    for action in ("pause", "activate"):
        got = await api.call("POST", f"/api/v1/experiments/{exp_id}/{action}", status=400)
        if action == "pause":
            assert "state STOPPING_KILLED cannot become PAUSED" in got["message"], got
    await api.call("POST", f"/api/v1/experiments/{exp_id}/cancel")  # asked already: no-op
    exp = (await api.call("GET", f"/api/v1/experiments/{exp_id}"))["experiment"]
    assert exp["state"] == "STATE_STOPPING_KILLED"
    other = (await create(api))["experiment"]["id"]
    await api.call("POST", f"/api/v1/experiments/{other}/cancel")  # nothing ran: ends at once
    for action in ("pause", "activate"):
        got = await api.call("POST", f"/api/v1/experiments/{other}/{action}", status=400)
        assert "terminal state" in got["message"], got
