"""Who may write to a trial (issue 29, attack 2): only the trial's own live allocation, by its
token; for an unmanaged (detached) trial, its owner or an admin. Reading stays open to every
user. A checkpoint report cannot adopt another trial's storage.

Each test is one attack: bob's user token on alice's trial; alice's own user token (and an
admin's) on her managed trial; another trial's allocation token; a finished allocation's
token; a stranger on a detached trial; a checkpoint report naming another trial's files."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dettui.master.http import appkeys
from dettui.master.routes import checkpoints as ckpt_routes
from dettui.master.store import exits
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation
from tests.master.conftest import SIMPLE_CONFIG, Api, allocate, ckpt_uuid
from tests.master.test_api import create

TASK = "Grpc-Metadata-x-allocation-token"  # where the real client sends DET_SESSION_TOKEN


@dataclass
class Lab:
    """alice and bob (ordinary users), an admin, and one running trial of each user."""

    alice: Api
    bob: Api
    admin: Api
    trial: int  # alice's
    task_id: str
    alloc: Allocation
    token: str  # alice's trial's allocation token
    bob_trial: int
    bob_token: str

    def task(self, token: str) -> dict[str, str]:
        return {TASK: f"Bearer {token}"}


async def user(api: Api, admin: Api, name: str) -> Api:
    await admin.call("POST", "/api/v1/users", {
        "user": {"username": name, "admin": False, "active": True},
        "password": "Secret-123", "isHashed": False})
    body = await api.call("POST", "/api/v1/auth/login",
                          {"username": name, "password": "Secret-123"}, headers={})
    return Api(api.client, body["token"])


async def login(api: Api, name: str) -> Api:
    body = await api.call("POST", "/api/v1/auth/login", {"username": name, "password": ""},
                          headers={})
    return Api(api.client, body["token"])


async def lab(api: Api, config: str = SIMPLE_CONFIG) -> Lab:
    admin = await login(api, "admin")
    alice, bob = await user(api, admin, "alice"), await user(api, admin, "bob")
    trial = (await create(alice, config))["experiment"]["id"]  # one trial each: ids match
    bob_trial = (await create(bob, config))["experiment"]["id"]
    alloc, token = await allocate(api, trial)
    _, bob_token = await allocate(api, bob_trial, "agent-y")
    task_id = (await alice.call("GET", f"/api/v1/trials/{trial}"))["trial"]["taskId"]
    return Lab(alice, bob, admin, trial, task_id, alloc, token, bob_trial, bob_token)


def writes(lab: Lab, steps: int = 1) -> list[tuple[str, Any]]:
    """Every write to alice's trial, as its training code (or launcher) would send it."""
    t, a = lab.trial, lab.alloc
    metrics = {"trialId": t, "trialRunId": a.run_id, "stepsCompleted": steps,
               "metrics": {"avgMetrics": {"loss": 1.0}}}
    resources = a.container_id(a.agent_id)
    return [
        (f"/api/v1/trials/{t}/metrics", {"group": "training", "metrics": metrics}),
        (f"/api/v1/trials/{t}/metrics/batch",
         {"reports": [{"group": "validation", "metrics": metrics}]}),
        (f"/api/v1/trials/{t}/progress", {"progress": 0.5}),
        (f"/api/v1/trials/{t}/runner/metadata", {"state": "planted"}),
        ("/api/v1/task/logs", {"logs": [{"taskId": lab.task_id, "log": "planted\n"}]}),
        ("/task-logs", [{"task_id": lab.task_id, "log": "planted\n"}]),
        ("/api/v1/checkpoints", checkpoint(lab, ckpt_uuid(steps))),
        ("/api/v1/trial-source-info", {"trialSourceInfo": {
            "checkpointUuid": ckpt_uuid(steps), "trialId": t,
            "trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}}),
        ("/api/v1/runs/start", {"runId": t}),
        (f"/api/v1/runs/{t}/metadata", {"metadata": {"planted": True}}),
        (f"/api/v1/trials/{t}/early_exit", {"reason": "EXITED_REASON_INVALID_HP"}),
        (f"/api/v1/allocations/{a.id}/resources/{resources}/daemon", {}),
        (f"/api/v1/allocations/{a.id}/signals/ack_preemption", None),
        (f"/api/v1/allocations/{a.id}/signals/pending_preemption", None),
    ]


def checkpoint(lab: Lab, uuid: str, steps: int = 1) -> dict[str, Any]:
    return {"uuid": uuid, "taskId": lab.task_id, "allocationId": lab.alloc.id,
            "resources": {}, "metadata": {"steps_completed": steps}}


async def untouched(lab: Lab) -> None:
    """Nothing of what the refused writes carried reached alice's trial."""
    t = lab.trial
    trial = (await lab.alice.call("GET", f"/api/v1/trials/{t}"))["trial"]
    assert trial["state"] == "STATE_RUNNING"
    assert (await lab.alice.call("GET", f"/api/v1/trials/{t}/metrics"))["metrics"] == []
    assert "planted" not in await logs(lab.alice, t)
    await lab.alice.call("GET", f"/api/v1/checkpoints/{ckpt_uuid(1)}", status=404)
    assert (await lab.alice.call("GET", f"/api/v1/runs/{t}/metadata"))["metadata"] == {}
    pre = await lab.alice.call("GET", f"/api/v1/allocations/{lab.alloc.id}/signals/preemption"
                                      "?timeout_seconds=0", headers=lab.task(lab.token))
    assert pre == {"preempt": False}
    stored = await lab.alice.client.server.app[appkeys.DB].read(trial_store.get, t)
    assert not stored.progress and stored.runner_state != "planted"
    assert not stored.searcher_stopped and stored.early_exit is None


async def logs(api: Api, trial: int) -> str:
    resp = await api.client.get(f"/api/v1/trials/{trial}/logs", headers=api.headers())
    assert resp.status == 200
    return await resp.text()


async def refused(api: Api, lab: Lab, headers: dict[str, str] | None, status: int = 403,
                  says: str = "") -> list[str]:
    """Every write route tried with `headers` (None: the api's own token): the messages of
    the refusals, each with `status` and saying `says`; nothing reached the trial."""
    messages = []
    for path, body in writes(lab):
        answer = await api.call("POST", path, body, headers=headers, status=status)
        assert says in str(answer), (path, answer)
        messages.append(str(answer["message"]))
    await untouched(lab)
    return messages


async def test_another_users_token_cannot_write_to_a_trial(api: Api) -> None:
    """The attack as found: bob's own login wrote metrics, logs, a checkpoint and a preemption
    signal into alice's running trial."""
    lab_ = await lab(api)
    messages = await refused(lab_.bob, lab_, None, says="only its own allocation's token")
    assert len(messages) == len(writes(lab_)) >= 14  # every write route, each refused


async def test_the_owners_and_an_admins_user_token_cannot_write_to_a_managed_trial(
        api: Api) -> None:
    """The cluster runs a managed trial: its reports come only from its allocation, never
    from a user's login (the real client sends DET_SESSION_TOKEN from inside a trial)."""
    lab_ = await lab(api)
    for who in (lab_.alice, lab_.admin):
        messages = await refused(who, lab_, None, says="is run by the cluster")
        assert len(messages) == len(writes(lab_))


async def test_another_trials_allocation_token_cannot_write_to_a_trial(api: Api) -> None:
    lab_ = await lab(api)
    messages = await refused(lab_.bob, lab_, lab_.task(lab_.bob_token), says="its own trial")
    assert len(messages) == len(writes(lab_))


async def test_a_finished_allocations_token_cannot_write(api: Api) -> None:
    lab_ = await lab(api)
    await api.client.server.app[appkeys.CLUSTER].dispatcher.run(exits.end, lab_.alloc.id, None,
                                                                "lost", "lost")
    answers = [await api.call("POST", path, body, headers=lab_.task(lab_.token), status=401)
               for path, body in writes(lab_)]
    assert answers and all("log in" in a["message"] or "credentials" in a["message"]
                           for a in answers), answers


async def test_the_trials_own_allocation_token_writes_every_report(api: Api) -> None:
    lab_ = await lab(api)
    for path, body in writes(lab_):
        if path == "/task-logs":  # the detached log shipper: users only, detached trials
            await api.call("POST", path, body, headers=lab_.task(lab_.token), status=403)
            continue
        await api.call("POST", path, body, headers=lab_.task(lab_.token))
    t = lab_.trial
    assert len((await lab_.bob.call("GET", f"/api/v1/trials/{t}/metrics"))["metrics"]) == 2
    ckpt = (await lab_.bob.call("GET", f"/api/v1/checkpoints/{ckpt_uuid(1)}"))["checkpoint"]
    assert ckpt["allocationId"] == lab_.alloc.id  # reading stays open to every user
    assert "planted" in await logs(lab_.bob, t)


async def test_a_report_cannot_name_another_allocation(api: Api) -> None:
    lab_ = await lab(api)
    body = {**checkpoint(lab_, ckpt_uuid(1)), "allocationId": "other.1"}
    got = await api.call("POST", "/api/v1/checkpoints", body, headers=lab_.task(lab_.token),
                         status=403)
    assert "other.1" in got["message"] or "allocation" in got["message"], got


# --- unmanaged (detached) trials: no allocation; the owner or an admin writes ----------------

DETACHED = """
checkpoint_storage: {type: directory, container_path: %s}
name: detached
"""


async def detached_trial(owner: Api, tmp_path: Path) -> tuple[int, str]:
    exp = await owner.call("POST", "/api/v1/experiments",
                           {"config": DETACHED % (tmp_path / "ckpts"), "unmanaged": True})
    trial = (await owner.call("POST", "/api/v1/trials", {
        "experimentId": exp["experiment"]["id"], "unmanaged": True}))["trial"]
    await owner.call("POST", f"/api/v1/trials/{trial['id']}/start", {"trialId": trial["id"]})
    return int(trial["id"]), str(trial["taskId"])


def detached_writes(trial: int, task_id: str, steps: int) -> list[tuple[str, Any]]:
    metrics = {"trialId": trial, "trialRunId": 1, "stepsCompleted": steps,
               "metrics": {"avgMetrics": {"loss": 1.0}}}
    uuid = ckpt_uuid(100 + steps)
    return [
        (f"/api/v1/trials/{trial}/metrics", {"group": "training", "metrics": metrics}),
        (f"/api/v1/trials/{trial}/progress", {"progress": 0.5}),
        (f"/api/v1/trials/{trial}/runner/metadata", {"state": "x"}),
        ("/api/v1/task/logs", {"logs": [{"taskId": task_id, "log": f"line {steps}\n"}]}),
        ("/task-logs", [{"task_id": task_id, "log": f"line {steps}\n"}]),
        ("/api/v1/checkpoints", {"uuid": uuid, "taskId": task_id, "resources": {},
                                 "metadata": {"steps_completed": steps}}),
        ("/api/v1/trial-source-info", {"trialSourceInfo": {
            "checkpointUuid": uuid, "trialId": trial,
            "trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}}),
        ("/api/v1/runs/start", {"runId": trial}),
        (f"/api/v1/runs/{trial}/metadata", {"metadata": {"steps": steps}}),
        (f"/api/v1/trials/{trial}/early_exit", {"reason": "EXITED_REASON_INVALID_HP"}),
    ]


async def test_a_detached_trial_is_written_by_its_owner_or_an_admin_only(
        api: Api, tmp_path: Path) -> None:
    admin = await login(api, "admin")
    alice, bob = await user(api, admin, "alice"), await user(api, admin, "bob")
    trial, task_id = await detached_trial(alice, tmp_path)
    for path, body in detached_writes(trial, task_id, 1):
        answer = await bob.call("POST", path, body, status=403)
        assert "only the owner of experiment" in answer["message"], (path, answer)
    assert (await alice.call("GET", f"/api/v1/trials/{trial}/metrics"))["metrics"] == []
    for steps, who in ((2, alice), (3, admin)):
        for path, body in detached_writes(trial, task_id, steps):
            await who.call("POST", path, body)
    reports = (await bob.call("GET", f"/api/v1/trials/{trial}/metrics"))["metrics"]
    assert [r["stepsCompleted"] for r in reports] == [2, 3]


# --- checkpoint reports cannot adopt another trial's storage ------------------------------

SHARED = SIMPLE_CONFIG + "checkpoint_storage: {type: shared_fs, host_path: %s}\n"


async def test_a_checkpoint_report_cannot_adopt_another_trials_uuid(api: Api) -> None:
    """bob's trial reports a uuid first; alice's trial cannot then claim it (nor the other
    way round), and the checkpoint stays bob's."""
    lab_ = await lab(api)
    bob_task = (await lab_.bob.call("GET", f"/api/v1/trials/{lab_.bob_trial}"))["trial"]
    uuid = ckpt_uuid(7)
    await api.call("POST", "/api/v1/checkpoints",
                   {"uuid": uuid, "taskId": bob_task["taskId"], "resources": {},
                    "metadata": {"steps_completed": 1}}, headers=lab_.task(lab_.bob_token))
    body = await api.call("POST", "/api/v1/checkpoints", checkpoint(lab_, uuid),
                          headers=lab_.task(lab_.token), status=409)
    assert "belongs to another trial" in body["message"]
    got = (await lab_.alice.call("GET", f"/api/v1/checkpoints/{uuid}"))["checkpoint"]
    assert got["training"]["trialId"] == lab_.bob_trial


async def test_a_checkpoint_report_cannot_adopt_files_older_than_its_allocation(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Storage the master sees (shared_fs): a uuid directory that was there before the
    allocation started, or a symlink to another checkpoint's directory, is not this
    allocation's to report; a directory it made is."""
    monkeypatch.setattr(ckpt_routes, "CLOCK_SLACK", 0.0)
    root = tmp_path / "shared"
    root.mkdir()
    old = root / ckpt_uuid(1)
    old.mkdir()  # planted before alice's trial starts
    (old / "model.pt").write_bytes(b"not alice's")
    time.sleep(0.05)
    lab_ = await lab(api, SHARED % root)
    task = lab_.task(lab_.token)
    body = await api.call("POST", "/api/v1/checkpoints", checkpoint(lab_, ckpt_uuid(1)),
                          headers=task, status=403)
    assert "was there before the allocation started" in body["message"]
    os.symlink(old, root / ckpt_uuid(2))
    body = await api.call("POST", "/api/v1/checkpoints", checkpoint(lab_, ckpt_uuid(2)),
                          headers=task, status=403)
    assert "not a directory" in body["message"]
    (root / ckpt_uuid(3)).mkdir()  # written by this allocation
    await api.call("POST", "/api/v1/checkpoints", checkpoint(lab_, ckpt_uuid(3)),
                   headers=task)
    await api.call("POST", "/api/v1/checkpoints", checkpoint(lab_, ckpt_uuid(3), 2),
                   headers=task)  # a re-report (client retry) is not refused
    await api.call("POST", "/api/v1/checkpoints", checkpoint(lab_, ckpt_uuid(4)),
                   headers=task)  # files the master cannot see: nothing to compare
