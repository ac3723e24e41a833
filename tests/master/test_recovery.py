"""Recovery after a crash, table-wise: each case writes a committed state a killed master can
leave behind, starts a master on it (and, in some cases, lets the agent register again, saying
what it still runs), and checks what the new master derived from it.

What a crash lost is re-derived in two places, each owning what it can know:
- `Allocations.recover`, at start-up, from the store alone: preemption timers, preemptions of
  trials a searcher stopped, allocations whose every part had exited, searcher events and
  experiments' ends, pending checkpoint GC.
- `Agents._reconcile`, when an agent registers, from the store and the agent's word: kills
  resent (`kill_requested`), starts resent (ASSIGNED, not running there), allocations the agent
  lost ended, ASSIGNED ones it runs marked RUNNING, and allocations unknown to the store killed.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import trials as trial_store
from dettui.master.store.db import connect
from tests.master.conftest import TEST_MINT, Api, agent_headers, ckpt_uuid
from tests.master.crashsim import inconsistencies
from tests.master.test_api import create


@dataclass(frozen=True)
class Case:
    name: str
    crash: Callable[[sqlite3.Connection], None]  # what the killed master had committed
    check: Callable[[dict[str, Any]], None]  # on what the new master shows
    agent_runs: bool | None = None  # the agent registers again running the allocation (True)
    # or nothing (False); None: no agent comes back


def _alloc(conn: sqlite3.Connection, **fields: Any) -> str:
    alloc = trial_store.allocate(conn, 1, "agent-x", [0], mint=TEST_MINT)
    assert alloc is not None
    if fields:
        sets = ", ".join(f"{k}=?" for k in fields)
        conn.execute(f"UPDATE allocations SET {sets} WHERE id=?", (*fields.values(), alloc.id))
    conn.commit()
    return alloc.id


def _trial_ended(conn: sqlite3.Connection, state: str = "STATE_COMPLETED") -> None:
    conn.execute("UPDATE trials SET state=?, end_time=1 WHERE id=1", (state,))
    conn.commit()


def _preempting(seen: dict[str, Any]) -> None:
    assert seen["preempting"] == [seen["alloc"]]
    assert seen["alloc_state"] != "EXITED" and seen["trial"] == "STATE_RUNNING"


def _every_part_exited(seen: dict[str, Any]) -> None:
    assert seen["alloc_state"] == "EXITED"
    assert (seen["trial"], seen["experiment"]) == ("STATE_COMPLETED", "STATE_COMPLETED")


def _stopped_by_searcher(seen: dict[str, Any]) -> None:
    assert seen["preempt_requested"] and seen["preempting"] == [seen["alloc"]]


def _settled(seen: dict[str, Any]) -> None:
    assert seen["experiment"] == "STATE_COMPLETED" and seen["gc_pending"] == 0


def _collected(seen: dict[str, Any]) -> None:
    assert seen["gc_pending"] == 0
    assert seen["checkpoints"] == {ckpt_uuid(1): "STATE_DELETED", ckpt_uuid(2): "STATE_COMPLETED"}


def _nothing_lost(seen: dict[str, Any]) -> None:
    assert seen["alloc_state"] == "ASSIGNED" and seen["trial"] == "STATE_RUNNING"
    assert seen["preempting"] == [] and seen["experiment"] == "STATE_ACTIVE"


def _kill_resent(seen: dict[str, Any]) -> None:
    assert seen["work"] == [("kill", seen["alloc"], "killed")]
    assert seen["alloc_state"] == "TERMINATING" and seen["trial"] == "STATE_RUNNING"


def _start_resent(seen: dict[str, Any]) -> None:
    assert seen["work"] == [("start", seen["alloc"], None)]
    assert seen["alloc_state"] == "ASSIGNED" and seen["trial"] == "STATE_RUNNING"


def _marked_running(seen: dict[str, Any]) -> None:
    assert seen["work"] == [] and seen["alloc_state"] == "RUNNING"


def _lost_and_requeued(seen: dict[str, Any]) -> None:
    assert seen["work"][0] == ("kill", seen["alloc"], "agent restarted without it")
    assert seen["alloc_state"] == "EXITED" and seen["exit_reason"] == "lost"
    assert seen["trial"] in ("STATE_QUEUED", "STATE_RUNNING")  # (a new run may have started)
    assert seen["restarts"] == 0  # a loss is not the trial's failure


def _unknown_killed(seen: dict[str, Any]) -> None:
    assert seen["work"] == [("kill", seen["alloc"], "unknown allocation")]
    assert seen["alloc_state"] == "EXITED"


def _gc_pending_with_checkpoints(conn: sqlite3.Connection) -> None:
    alloc_id = _alloc(conn, state="EXITED", exit_code=0, end_time=2)
    for n in (1, 2):
        conn.execute(
            "INSERT INTO checkpoints (uuid, task_id, allocation_id, report_time, state, "
            "resources, metadata, trial_id, experiment_id, steps_completed) "
            "VALUES (?, (SELECT task_id FROM trials WHERE id=1), ?, ?, 'STATE_COMPLETED', "
            "'{}', ?, 1, 1, ?)", (ckpt_uuid(n), alloc_id, n, f'{{"steps_completed": {n}}}', n))
    conn.execute("UPDATE trials SET state='STATE_COMPLETED', end_time=3 WHERE id=1")
    config = json.loads(conn.execute("SELECT config FROM experiments WHERE id=1").fetchone()[0])
    config["checkpoint_storage"].update(save_trial_best=0, save_trial_latest=1)
    conn.execute("UPDATE experiments SET state='STATE_COMPLETED', end_time=3, gc_pending=1, "
                 "config=? WHERE id=1", (json.dumps(config),))
    conn.commit()


def _preempt_asked(conn: sqlite3.Connection) -> None:
    _alloc(conn, preempt_requested=1, state="RUNNING")


def _part_exited(conn: sqlite3.Connection) -> None:
    _alloc(conn, part_exits='{"agent-x": [0, ""]}')


def _searcher_stopped(conn: sqlite3.Connection) -> None:
    _alloc(conn, state="RUNNING")
    conn.execute("UPDATE trials SET searcher_stopped=1 WHERE id=1")
    conn.commit()


def _last_trial_ended(conn: sqlite3.Connection) -> None:
    _alloc(conn, state="EXITED", exit_code=0, end_time=2)
    _trial_ended(conn)


def _running(conn: sqlite3.Connection) -> None:
    _alloc(conn)


def _kill_asked(conn: sqlite3.Connection) -> None:
    _alloc(conn, kill_requested=1, state="TERMINATING")


def _was_running(conn: sqlite3.Connection) -> None:
    _alloc(conn, state="RUNNING")




CASES = [
    Case("a preemption asked before the crash keeps its timeout", _preempt_asked, _preempting),
    Case("an allocation whose every part had exited ends, and its trial moves on",
         _part_exited, _every_part_exited),
    Case("a trial its searcher stopped gets the preemption it was not sent",
         _searcher_stopped, _stopped_by_searcher),
    Case("an experiment whose last trial had ended is settled", _last_trial_ended, _settled),
    Case("an experiment that ended with its checkpoint GC pending is collected",
         _gc_pending_with_checkpoints, _collected),
    Case("a running allocation with nothing pending is left as it was", _running, _nothing_lost),
    # `Agents._reconcile`, when the agent registers again:
    Case("a kill committed just before the crash is resent when the agent re-registers",
         _kill_asked, _kill_resent, agent_runs=True),
    Case("an ASSIGNED allocation whose start message was lost is started again",
         _running, _start_resent, agent_runs=False),
    Case("an ASSIGNED allocation the agent runs becomes RUNNING", _running, _marked_running,
         agent_runs=True),
    Case("an allocation the agent no longer runs is lost and its trial queued again",
         _was_running, _lost_and_requeued, agent_runs=False),
    Case("an allocation that had exited but still runs on the agent is killed there",
         _last_trial_ended, _unknown_killed, agent_runs=True),
]


async def _agent_returns(api: Api, runs: bool | None,
                         settings: MasterSettings) -> list[tuple[str, str, str | None]]:
    """The agent registers again, running the allocation or nothing; the work it is sent."""
    if runs is None:
        return []
    conn = connect(settings.db_target)
    try:
        alloc_ids = [r[0] for r in conn.execute("SELECT id FROM allocations")] if runs else []
    finally:
        conn.close()
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "agent-x", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": alloc_ids},
        headers=agent)
    got = await api.call("GET", "/api/v1/agents/agent-x/work?timeout_seconds=0", headers=agent)
    return [(w["kind"], w["allocationId"], w.get("reason")) for w in got["work"]]


async def _one_experiment(settings: MasterSettings, aiohttp_client: Any) -> str:
    """A first master creates one experiment and stops; the admin's token."""
    first = await aiohttp_client(create_app(settings))
    resp = await first.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    token = str((await resp.json())["token"])
    await create(Api(first, token))
    await first.close()
    return token


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_recovery(master_settings: MasterSettings, aiohttp_client: Any, case: Case) -> None:
    settings = master_settings
    token = await _one_experiment(settings, aiohttp_client)
    conn = connect(settings.db_target)
    case.crash(conn)
    conn.close()

    second = await aiohttp_client(create_app(settings))
    app = second.server.app
    db = app[appkeys.DB]
    api = Api(second, token)
    work = await _agent_returns(api, case.agent_runs, settings)
    allocs = await db.run(trial_store.allocations_for_trial, 1)
    trial = await db.run(trial_store.get, 1)
    exp = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]
    conn = connect(settings.db_target)
    try:
        checkpoints = {r[0]: r[1] for r in conn.execute("SELECT uuid, state FROM checkpoints")}
        gc_pending = conn.execute("SELECT gc_pending FROM experiments WHERE id=1").fetchone()[0]
    finally:
        conn.close()
    seen = {
        "alloc": allocs[0].id if allocs else None,
        "alloc_state": allocs[0].state.value if allocs else None,
        "exit_reason": allocs[0].exit_reason if allocs else None, "work": work,
        "preempt_requested": bool(allocs and allocs[0].preempt_requested),
        "preempting": sorted(app[appkeys.CLUSTER].dispatcher.preempting),
        "trial": trial.state.value, "restarts": trial.restarts,
        "experiment": exp["state"], "gc_pending": gc_pending, "checkpoints": checkpoints,
    }
    assert not inconsistencies(settings.db_target)  # what every committed state must hold
    case.check(seen)


async def test_what_an_older_version_did_not_keep_is_computed_while_the_master_serves(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    """Best validations and trial summaries an older version did not keep (`best_stale`,
    `summary_stale`) are computed by a backfill after the master is up, not before it answers:
    on a database of millions of reports that took minutes of start-up."""
    from dettui.master.store import metrics as metric_store

    settings = master_settings
    token = await _one_experiment(settings, aiohttp_client)
    conn = connect(settings.db_target)
    for steps, loss in ((10, 0.5), (20, 0.25), (30, 0.75)):
        metric_store.report(conn, trial_id=1, run_id=1, group="validation", steps=steps,
                            report_time=float(steps), metrics={"loss": loss},
                            batch_metrics=None)
    conn.execute("UPDATE experiments SET best_value=NULL, best_trial_id=NULL, best_stale=1")
    conn.execute("UPDATE trials SET summary_metrics=NULL, best_value=NULL, best_steps=NULL, "
                 "summary_stale=1")
    conn.commit()
    conn.close()

    second = await aiohttp_client(create_app(settings))
    api = Api(second, token)
    for _ in range(100):
        trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
        exp = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]
        if trial.get("summaryMetrics") and exp.get("bestTrialSearcherMetric") is not None:
            break
        await asyncio.sleep(0.05)
    assert (exp["bestTrialSearcherMetric"], exp["bestTrialId"]) == (0.25, 1)
    assert trial["summaryMetrics"]["validation_metrics"]["loss"]["min"] == 0.25
    db = second.server.app[appkeys.DB]
    left = await db.run(lambda c: c.execute(
        "SELECT (SELECT COUNT(*) FROM experiments WHERE best_stale=1) + "
        "(SELECT COUNT(*) FROM trials WHERE summary_stale=1)").fetchone()[0])
    assert left == 0
