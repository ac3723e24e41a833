"""Daemon parts of an allocation (Determined's MarkAllocationResourcesDaemon, which the real
`determined.launch.deepspeed`/`horovod` call from every non-chief node before its sshd): ended
once every worker part has exited, their end not counted; a daemon failing while a worker
still runs fails the allocation as any part does."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from dettui.master.http import appkeys
from dettui.master.store import exits, trials
from dettui.models import AllocationState, TrialState
from tests.master.conftest import TEST_MINT, Api
from tests.master.test_api import create
from tests.master.test_auth import as_user
from tests.master.test_store import _trial


def _marked(conn: object, alloc_id: str, agent_id: str) -> SimpleNamespace | None:
    """`exits.mark_daemon`'s answer: None when ignored, else the parts it ends."""
    done = exits.mark_daemon(conn, alloc_id, agent_id)  # type: ignore[arg-type]
    if not done.value:
        return None
    return SimpleNamespace(end_parts=tuple(e.agent_id for e in done.effects.end_parts))

A, B = "agent-a", "agent-b"  # the chief's node and the other one
BOTH = frozenset({A, B})


def _two_nodes(store_target: Path | str) -> tuple[sqlite3.Connection, str]:
    conn, trial_id = _trial(store_target)
    alloc = trials.allocate(conn, trial_id, A, [0], parts=[(A, [0]), (B, [0])], mint=TEST_MINT)
    return conn, alloc.id


def _trial_state(conn: sqlite3.Connection) -> TrialState:
    return trials.get(conn, 1).state


def test_the_daemon_ends_when_the_worker_has_and_its_kill_does_not_count(
        store_target: Path | str) -> None:
    conn, alloc_id = _two_nodes(store_target)
    marked = _marked(conn, alloc_id, B)
    assert marked is not None and marked.end_parts == ()
    assert trials.allocation(conn, alloc_id).daemons == [B]
    done = exits.part_exit_in(conn, alloc_id, A, 0, "", BOTH)
    assert done.end_parts == (B,) and done.daemons and not done.done
    assert done.alloc.state is AllocationState.TERMINATING
    done = exits.part_exit_in(conn, alloc_id, B, 137, "killed", BOTH)
    assert done.done and _trial_state(conn) is TrialState.COMPLETED
    assert trials.get(conn, 1).restarts == 0


def test_without_the_mark_the_other_node_is_waited_for_and_its_kill_fails_the_trial(
        store_target: Path | str) -> None:
    conn, alloc_id = _two_nodes(store_target)
    done = exits.part_exit_in(conn, alloc_id, A, 0, "", BOTH)
    assert done.end_parts == () and not done.done
    done = exits.part_exit_in(conn, alloc_id, B, 137, "killed", BOTH)
    assert done.done and _trial_state(conn) is TrialState.QUEUED
    assert trials.get(conn, 1).restarts == 1


def test_a_daemon_failing_while_the_worker_runs_fails_the_allocation(
        store_target: Path | str) -> None:
    conn, alloc_id = _two_nodes(store_target)
    _marked(conn, alloc_id, B)
    done = exits.part_exit_in(conn, alloc_id, B, 1, "", BOTH)
    assert done.end_parts == (A,) and not done.daemons
    done = exits.part_exit_in(conn, alloc_id, A, None, "killed", BOTH)
    assert done.done and (done.alloc.exit_code, done.alloc.exit_reason) == (1, "error")
    assert trials.get(conn, 1).restarts == 1


def test_marked_after_the_worker_exited_it_ends_at_once(store_target: Path | str) -> None:
    conn, alloc_id = _two_nodes(store_target)
    assert exits.part_exit_in(conn, alloc_id, A, 0, "", BOTH).end_parts == ()
    marked = _marked(conn, alloc_id, B)
    assert marked is not None and marked.end_parts == (B,)
    assert _marked(conn, alloc_id, B).end_parts == (), "told once"  # type: ignore
    exits.part_exit_in(conn, alloc_id, B, -9, "killed", BOTH)
    assert _trial_state(conn) is TrialState.COMPLETED


def test_a_daemon_whose_agent_is_gone_is_not_waited_for(store_target: Path | str) -> None:
    conn, alloc_id = _two_nodes(store_target)
    _marked(conn, alloc_id, B)
    done = exits.part_exit_in(conn, alloc_id, A, 0, "", frozenset({A}))
    assert done.done and _trial_state(conn) is TrialState.COMPLETED


def test_every_part_a_daemon_ends_the_allocation_and_a_single_part_is_ignored(
        store_target: Path | str) -> None:
    conn, alloc_id = _two_nodes(store_target)
    _marked(conn, alloc_id, B)
    marked = _marked(conn, alloc_id, A)
    assert marked is not None and marked.end_parts == (A, B)
    exits.part_exit_in(conn, alloc_id, A, None, "killed", BOTH)
    exits.part_exit_in(conn, alloc_id, B, None, "killed", BOTH)
    assert trials.get(conn, 1).restarts == 1, "nothing did the work: a failure"
    one = trials.allocate(conn, 1, A, [0], mint=TEST_MINT)
    assert _marked(conn, one.id, A) is None
    assert trials.allocation(conn, one.id).daemons == []
    exits.part_exit_in(conn, one.id, A, 0, "", BOTH)
    with pytest.raises(Exception, match="has exited"):
        _marked(conn, one.id, A)


async def test_the_route_marks_the_part_its_resources_id_names(api: Api) -> None:
    """What the real launchers send: the allocation's token, no body; an allocation of one
    part answers 200 and says in the trial's log that it ignored the request."""
    admin = await as_user(api, "admin")
    await create(api)  # trial 1: determined's
    await create(admin)  # trial 2: the admin's
    app = api.client.server.app
    db, mint = app[appkeys.DB], app[appkeys.MINT]
    two = await db.run(trials.allocate, 1, A, [0], parts=[(A, [0]), (B, [0])], mint=mint)
    one = await db.run(trials.allocate, 2, A, [1], mint=mint)
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {mint.allocation(two.id)}"}
    path = f"/api/v1/allocations/{two.id}/resources/{two.container_id(B)}/daemon"
    assert await api.call("POST", path, headers=task) == {}
    assert (await db.run(trials.allocation, two.id)).daemons == [B]
    await api.call("POST", path, {"allocationId": "other", "resourcesId": None}, headers=task,
                   status=400)
    await api.call("POST", f"/api/v1/allocations/{two.id}/resources/nope/daemon",
                   headers=task, status=404)
    theirs = f"/api/v1/allocations/{one.id}/resources/{one.container_id(A)}/daemon"
    await api.call("POST", theirs, headers=task, status=403)
    for user in (api, admin):  # a user's token, even the owner's or an admin's: never
        refused = await user.call("POST", theirs, status=403)
        assert "only its own allocation's token" in refused["message"]
    own = {"Grpc-Metadata-x-allocation-token": f"Bearer {mint.allocation(one.id)}"}
    assert await api.call("POST", theirs, headers=own) == {}
    assert (await db.run(trials.allocation, one.id)).daemons == []
    resp = await api.client.get("/api/v1/trials/2/logs", headers=api.headers())
    last = json.loads((await resp.text()).splitlines()[-1])  # after the start marker
    assert last["result"]["log"].startswith("Ignoring request to daemonize resources")
    await app[appkeys.CLUSTER].agents.part_exit(A, two.id, 0, "")  # B's agent is not here
    assert (await api.call("GET", "/api/v1/trials/1"))["trial"]["state"] == "STATE_COMPLETED"
