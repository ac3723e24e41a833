"""Start-up recovery (`Allocations.recover`, the one function that re-derives what a crash lost),
table-wise: each case writes a committed state a killed master can leave behind, starts a
master on it, and checks what the new master derived from it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from dettui.master import keys
from dettui.master.app import create_app
from dettui.master.settings import MasterSettings
from dettui.master.store import trials as trial_store
from dettui.master.store.db import connect
from tests.master.conftest import TEST_MINT, Api, ckpt_uuid
from tests.master.test_api import create


@dataclass(frozen=True)
class Case:
    name: str
    crash: Callable[[sqlite3.Connection], None]  # what the killed master had committed
    check: Callable[[dict[str, Any]], None]  # on what the new master shows


def _alloc(conn: sqlite3.Connection, **fields: Any) -> str:
    alloc = trial_store.allocate(conn, 1, "agent-x", [0], mint=TEST_MINT)
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
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_recovery(master_settings: MasterSettings, aiohttp_client: Any, case: Case) -> None:
    settings = master_settings
    first = await aiohttp_client(create_app(settings))
    resp = await first.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    api = Api(first, (await resp.json())["token"])
    await create(api)
    await first.close()
    conn = connect(settings.db_target)
    case.crash(conn)
    conn.close()

    second = await aiohttp_client(create_app(settings))
    app = second.server.app
    db = app[keys.DB]
    allocs = await db.run(trial_store.allocations_for_trial, 1)
    api = Api(second, api.token)
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
        "preempt_requested": bool(allocs and allocs[0].preempt_requested),
        "preempting": sorted(app[keys.CLUSTER].hub.preempting),
        "trial": (await db.run(trial_store.get, 1)).state.value,
        "experiment": exp["state"], "gc_pending": gc_pending, "checkpoints": checkpoints,
    }
    case.check(seen)
