"""Unmanaged (detached) experiments and trials over the REST API (WIRE §8), and their errors."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from dettui.master.effects import Effects
from dettui.master.http import appkeys
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from tests.master.conftest import Api, allocate, ckpt_uuid
from tests.master.test_api import create as create_managed

# What Determined's detached client sends: every key, unset ones as null.
CORE_V2_CONFIG = """
checkpoint_storage: {type: directory, container_path: %s}
data: null
description: null
labels: null
name: null
project: null
searcher: null
workspace: null
"""


async def new_experiment(api: Api, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    body = {"config": CORE_V2_CONFIG % (tmp_path / "ckpts"), "unmanaged": True, **extra}
    return dict(await api.call("POST", "/api/v1/experiments", body))


async def new_trial(api: Api, exp_id: int, hparams: Any = None) -> dict[str, Any]:
    body = {"experimentId": exp_id, "hparams": hparams, "unmanaged": True}
    return dict((await api.call("POST", "/api/v1/trials", body))["trial"])


async def exp_state(api: Api, exp_id: int) -> str:
    return str((await api.call("GET", f"/api/v1/experiments/{exp_id}"))["experiment"]["state"])


def metrics_body(trial_id: int, run_id: int, steps: int, **values: float) -> dict[str, Any]:
    return {"group": "training", "metrics": {
        "trialId": trial_id, "trialRunId": run_id, "stepsCompleted": steps,
        "metrics": {"avgMetrics": values}}}


def checkpoint_body(task_id: str, uuid: str, steps: int) -> dict[str, Any]:
    return {"uuid": uuid, "taskId": task_id, "allocationId": None,
            "reportTime": "2026-11-22T04:56:55.092389+00:00",
            "resources": {"metadata.json": "24"}, "metadata": {"steps_completed": steps},
            "state": "STATE_COMPLETED", "training": {}, "storageId": None}


async def test_detached_sequence_end_to_end(api: Api, tmp_path: Path) -> None:
    created = await new_experiment(api, tmp_path)
    exp = created["experiment"]
    assert exp["unmanaged"] is True and exp["state"] == "STATE_PAUSED"
    assert exp["name"].startswith("unmanaged-") and len(exp["name"]) == len("unmanaged-") + 8
    assert created["config"]["searcher"]["name"] == "single"
    assert created["config"]["searcher"]["metric"] == "unmanaged"
    assert created["config"]["checkpoint_storage"]["container_path"] == str(tmp_path / "ckpts")

    trial = await new_trial(api, exp["id"], {"lr": 0.1})
    assert trial["state"] == "STATE_PAUSED" and trial["hparams"] == {"lr": 0.1}
    assert trial["taskId"].startswith(f"{exp['id']}.") and len(trial["taskId"]) > 10
    tid = trial["id"]

    started = await api.call("POST", f"/api/v1/trials/{tid}/start",
                             {"trialId": tid, "resume": True})
    assert started == {"trialRunId": 1, "stepsCompleted": 0, "latestCheckpoint": None}
    assert await exp_state(api, exp["id"]) == "STATE_RUNNING"
    running = await api.call("PATCH", f"/api/v1/trials/{tid}",
                             {"trialId": tid, "state": "STATE_RUNNING"})
    assert running["trial"]["state"] == "STATE_RUNNING"
    beat = await api.call("PATCH", f"/api/v1/trials/{tid}", {"trialId": tid})
    assert beat["trial"]["state"] == "STATE_RUNNING" and beat["trial"]["endTime"] is None

    # Metrics, checkpoints, progress and logs go through the ordinary endpoints (user token).
    await api.call("POST", f"/api/v1/trials/{tid}/metrics", metrics_body(tid, 1, 10, loss=0.5))
    await api.call("POST", f"/api/v1/trials/{tid}/progress", {"progress": 0.5})
    await api.call("POST", "/api/v1/checkpoints",
                   checkpoint_body(trial["taskId"], ckpt_uuid(1), 10))
    await api.call("POST", "/api/v1/task/logs", {"logs": [
        {"task_id": trial["taskId"], "timestamp": "2026-11-22T04:56:55+00:00", "rank_id": 0,
         "stdtype": "stdout", "log": "hello from outside\n"}]})
    await api.call("POST", "/task-logs", [
        {"task_id": trial["taskId"], "timestamp": "2026-11-22T04:56:56+00:00", "log": "v2\n"}])

    done = await api.call("PATCH", f"/api/v1/trials/{tid}",
                          {"trialId": tid, "state": "STATE_COMPLETED"})
    assert done["trial"]["state"] == "STATE_COMPLETED" and done["trial"]["endTime"]
    got = (await api.call("GET", f"/api/v1/experiments/{exp['id']}"))["experiment"]
    assert got["state"] == "STATE_COMPLETED" and got["endTime"]
    trials = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"]
    assert trials[0]["totalBatchesProcessed"] == 10
    assert trials[0]["latestTraining"]["metrics"]["avgMetrics"] == {"loss": 0.5}
    ckpts = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/checkpoints"))
    assert [(c["uuid"], c["allocationId"]) for c in ckpts["checkpoints"]] == [
        (ckpt_uuid(1), None)]
    resp = await api.client.get(f"/api/v1/trials/{tid}/logs", headers=api.headers())
    logs = [json.loads(line)["result"]["log"] for line in (await resp.text()).splitlines()]
    assert logs == ["hello from outside\n", "v2\n"]


async def test_restart_resumes_from_the_checkpoint_with_most_steps(
    api: Api, tmp_path: Path
) -> None:
    exp = (await new_experiment(api, tmp_path))["experiment"]
    trial = await new_trial(api, exp["id"])
    tid = trial["id"]
    await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid, "resume": False})
    again = await api.call("POST", f"/api/v1/trials/{tid}/start",
                           {"trialId": tid, "resume": False}, status=400)
    assert again["message"] == "trial has already been started"
    for uuid, steps in ((ckpt_uuid(20), 20), (ckpt_uuid(30), 30), (ckpt_uuid(10), 10)):
        await api.call("POST", "/api/v1/checkpoints", checkpoint_body(trial["taskId"], uuid,
                                                                      steps))
    await api.call("PATCH", f"/api/v1/trials/{tid}", {"trialId": tid, "state": "STATE_ERROR"})
    assert await exp_state(api, exp["id"]) == "STATE_ERROR"
    second = await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid,
                                                                     "resume": True})
    assert second == {"trialRunId": 2, "stepsCompleted": 30, "latestCheckpoint": ckpt_uuid(30)}
    assert await exp_state(api, exp["id"]) == "STATE_RUNNING"
    stale = await api.call("POST", f"/api/v1/trials/{tid}/metrics",
                           metrics_body(tid, 1, 40, loss=0.1), status=400)
    assert stale["message"] == "invalid run id, 1 (reported) != 2 (expected)"


async def test_experiment_state_is_the_most_advanced_trials(api: Api, tmp_path: Path) -> None:
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    a, b = (await new_trial(api, exp_id))["id"], (await new_trial(api, exp_id))["id"]
    assert await exp_state(api, exp_id) == "STATE_PAUSED"
    for tid in (a, b):
        await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid, "resume": True})
    await api.call("PATCH", f"/api/v1/trials/{a}", {"trialId": a, "state": "STATE_ERROR"})
    assert await exp_state(api, exp_id) == "STATE_RUNNING"
    await api.call("PATCH", f"/api/v1/trials/{b}", {"trialId": b, "state": "COMPLETED"})
    assert await exp_state(api, exp_id) == "STATE_COMPLETED"
    await api.call("PATCH", f"/api/v1/trials/{b}", {"trialId": b, "state": "STATE_PAUSED"})
    assert await exp_state(api, exp_id) == "STATE_ERROR"


async def test_external_ids_find_the_same_experiment_and_trial(api: Api, tmp_path: Path) -> None:
    body = {"config": CORE_V2_CONFIG % (tmp_path / "ckpts"), "unmanaged": True}
    first = await api.call("PUT", "/api/v1/experiments/by-external-id/run-a", body)
    again = await api.call("PUT", "/api/v1/experiments/by-external-id/run-a", body)
    other = await api.call("PUT", "/api/v1/experiments/by-external-id/run-b", body)
    exp_id = first["experiment"]["id"]
    assert again["experiment"]["id"] == exp_id != other["experiment"]["id"]
    assert first["experiment"]["externalExperimentId"] == "run-a"
    put = {"createTrialRequest": {"experimentId": exp_id, "hparams": {"x": 1},
                                  "unmanaged": True}, "externalTrialId": "t1"}
    t1 = (await api.call("PUT", "/api/v1/trials", put))["trial"]
    t1_again = (await api.call("PUT", "/api/v1/trials", put))["trial"]
    assert t1["id"] == t1_again["id"] and t1["taskId"] == f"{exp_id}.t1"
    t2 = (await api.call("PUT", "/api/v1/trials", {**put, "externalTrialId": "t2"}))["trial"]
    assert t2["id"] != t1["id"]


async def test_another_users_external_id_does_not_capture_mine(api: Api, tmp_path: Path) -> None:
    """Issue 29, review: bob's PUT by-external-id/run-1 came first, and alice's detached run-1
    was handed bob's experiment, then refused its trial. An external id is its owner's name:
    alice gets an experiment of her own, runs her trial in it, and each finds their own again
    (an admin's run-1 too)."""
    from tests.master.test_trial_writes import login, user

    admin = await login(api, "admin")
    alice, bob = await user(api, admin, "alice"), await user(api, admin, "bob")
    body = {"config": CORE_V2_CONFIG % (tmp_path / "ckpts"), "unmanaged": True}
    path = "/api/v1/experiments/by-external-id/run-1"
    bobs = (await bob.call("PUT", path, body))["experiment"]
    alices = (await alice.call("PUT", path, body))["experiment"]
    assert alices["id"] != bobs["id"]
    assert (alices["username"], bobs["username"]) == ("alice", "bob")
    assert alices["externalExperimentId"] == bobs["externalExperimentId"] == "run-1"
    put = {"createTrialRequest": {"experimentId": alices["id"], "hparams": None,
                                  "unmanaged": True}, "externalTrialId": "t1"}
    trial = (await alice.call("PUT", "/api/v1/trials", put))["trial"]
    await alice.call("POST", f"/api/v1/trials/{trial['id']}/start", {"trialId": trial["id"]})
    await bob.call("PUT", "/api/v1/trials", put, status=403)  # her experiment stays hers
    assert (await alice.call("PUT", path, body))["experiment"]["id"] == alices["id"]
    assert (await bob.call("PUT", path, body))["experiment"]["id"] == bobs["id"]
    admins = (await admin.call("PUT", path, body))["experiment"]
    assert admins["id"] not in (alices["id"], bobs["id"])


async def test_unmanaged_experiments_are_never_jobs_or_scheduled(
    api: Api, tmp_path: Path
) -> None:
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    tid = (await new_trial(api, exp_id))["id"]
    await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid, "resume": True})
    app = api.client.server.app
    assert await app[appkeys.DB].run(trial_store.pending) == []
    await app[appkeys.CLUSTER].scheduling.run_pass()
    assert await app[appkeys.DB].run(trial_store.live_allocations) == []
    jobs = await api.call("GET", "/api/v1/job-queues-v2?limit=100&offset=0")
    assert jobs["jobs"] == []
    listed = await api.call("GET", "/api/v1/experiments")
    assert [e["id"] for e in listed["experiments"]] == [exp_id]


async def test_pause_is_refused_and_cancel_ends_the_trials(api: Api, tmp_path: Path) -> None:
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    tid = (await new_trial(api, exp_id))["id"]
    await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid, "resume": True})
    for verb in ("pause", "activate"):
        refused = await api.call("POST", f"/api/v1/experiments/{exp_id}/{verb}", status=400)
        assert "unmanaged" in refused["message"]
    await api.call("POST", f"/api/v1/experiments/{exp_id}/cancel")
    assert await exp_state(api, exp_id) == "STATE_CANCELED"
    trial = (await api.call("GET", f"/api/v1/trials/{tid}"))["trial"]
    assert trial["state"] == "STATE_CANCELED" and trial["endTime"]
    await api.call("POST", f"/api/v1/experiments/{exp_id}/archive")


async def test_a_silent_trial_is_lost_and_ends_in_error(api: Api, tmp_path: Path) -> None:
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    tid = (await new_trial(api, exp_id))["id"]
    await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid, "resume": True})
    db = api.client.server.app[appkeys.DB]
    assert (await db.command(unmanaged_store.mark_lost, time.time() - 300)) == Effects()
    told = await db.command(unmanaged_store.mark_lost, time.time() + 1)
    assert told.collect == (exp_id,)  # it ended: its checkpoints are collected
    exp = (await api.call("GET", f"/api/v1/experiments/{exp_id}"))["experiment"]
    assert exp["state"] == "STATE_ERROR"
    assert (await api.call("GET", f"/api/v1/trials/{tid}"))["trial"]["state"] == "STATE_ERROR"


async def test_checkpoint_gc_runs_when_a_detached_experiment_ends(
    api: Api, tmp_path: Path
) -> None:
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    trial = await new_trial(api, exp_id)
    tid = trial["id"]
    await api.call("POST", f"/api/v1/trials/{tid}/start", {"trialId": tid, "resume": True})
    for steps in (1, 2, 3):
        (tmp_path / "ckpts" / ckpt_uuid(steps)).mkdir(parents=True)
        await api.call("POST", "/api/v1/checkpoints",
                       checkpoint_body(trial["taskId"], ckpt_uuid(steps), steps))
    await api.call("PATCH", f"/api/v1/trials/{tid}", {"trialId": tid, "state": "STATE_COMPLETED"})
    ckpts = (await api.call("GET", f"/api/v1/experiments/{exp_id}/checkpoints"))["checkpoints"]
    assert {c["uuid"]: c["state"] for c in ckpts} == {
        ckpt_uuid(1): "STATE_DELETED", ckpt_uuid(2): "STATE_DELETED",
        ckpt_uuid(3): "STATE_COMPLETED"}
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == [ckpt_uuid(3)]


async def test_managed_experiments_refuse_unmanaged_trial_calls(api: Api) -> None:
    await create_managed(api)
    bad = await api.call("POST", "/api/v1/trials",
                         {"experimentId": 1, "hparams": None, "unmanaged": True}, status=400)
    assert bad["message"].startswith("only unmanaged trials are supported")
    for method, path, body in (("POST", "/api/v1/trials/1/start", {"trialId": 1}),
                               ("PATCH", "/api/v1/trials/1", {"trialId": 1})):
        bad = await api.call(method, path, body, status=400)
        assert bad["message"] == "only unmanaged trials are supported"
    assert (await api.call("GET", "/api/v1/trials/1"))["trial"]["state"] == "STATE_QUEUED"


async def test_allocation_tokens_cannot_create_detached_trials(api: Api, tmp_path: Path) -> None:
    await create_managed(api)
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    got = await api.call("POST", "/api/v1/trials", {"experimentId": exp_id, "unmanaged": True},
                         headers=task, status=403)
    assert "allocation" in got["message"], got
    trials = (await api.call("GET", f"/api/v1/experiments/{exp_id}/trials"))["trials"]
    assert trials == []  # nothing made


ERRORS = [
    # (method, path, body, status, words the message must contain)
    ("POST", "/api/v1/trials", {"experimentId": "@exp", "unmanaged": False}, 400,
     "only unmanaged trials are supported"),
    ("POST", "/api/v1/trials", {"experimentId": "@exp"}, 400,
     "only unmanaged trials are supported"),
    ("POST", "/api/v1/trials", {"hparams": {}, "unmanaged": True}, 400, "experimentId"),
    ("POST", "/api/v1/trials", {"experimentId": "@exp", "hparams": [1], "unmanaged": True},
     400, "hparams"),
    ("POST", "/api/v1/trials", {"experimentId": 99, "unmanaged": True}, 404,
     "experiment '99' not found"),
    ("PUT", "/api/v1/trials", {"externalTrialId": "t"}, 400, "createTrialRequest"),
    ("PUT", "/api/v1/trials",
     {"createTrialRequest": {"experimentId": "@exp", "unmanaged": True}}, 400,
     "externalTrialId"),
    ("PUT", "/api/v1/trials",
     {"createTrialRequest": {"experimentId": "@exp", "unmanaged": True},
      "externalTrialId": "  "}, 400, "externalTrialId"),
    ("POST", "/api/v1/trials/99/start", {"trialId": 99, "resume": True}, 404,
     "trial 99 not found"),
    ("POST", "/api/v1/trials/@trial/start", {"trialId": 12345}, 400, "trialId"),
    ("POST", "/api/v1/trials/@trial/start", {"resume": "maybe"}, 400, "resume"),
    ("PATCH", "/api/v1/trials/99", {"trialId": 99, "state": "STATE_COMPLETED"}, 404,
     "trial 99 not found"),
    ("PATCH", "/api/v1/trials/@trial", {"state": "STATE_FINISHED"}, 400, "state"),
    ("PATCH", "/api/v1/trials/@trial", {"state": "STATE_QUEUED"}, 400, "state"),
    ("PATCH", "/api/v1/trials/@trial", {"state": 7}, 400, "state"),
    ("PATCH", "/api/v1/trials/@trial", {"trialId": 12345}, 400, "trialId"),
    ("PUT", "/api/v1/experiments/by-external-id/x", {"config": "name: x"}, 400,
     "only unmanaged experiments are supported"),
    ("PUT", "/api/v1/experiments/by-external-id/x",
     {"config": "name: x", "unmanaged": True, "parentId": 3}, 400, "fork"),
    ("POST", "/api/v1/experiments",
     {"config": "name: x", "unmanaged": True,
      "modelDefinition": [{"path": "a", "type": 48, "content": "", "mtime": "1",
                           "mode": 33188, "uid": 0, "gid": 0}]}, 400, "modelDefinition"),
    ("POST", "/api/v1/experiments", {"config": "labels: 5\n", "unmanaged": True}, 400,
     "labels"),
    ("POST", "/api/v1/experiments",
     {"config": "checkpoint_storage: {type: directory}\n", "unmanaged": True}, 400,
     "checkpoint_storage.container_path"),
    ("POST", "/api/v1/experiments", {"config": "[1, 2]", "unmanaged": True}, 400, "mapping"),
    ("POST", "/api/v1/runs/start", {"checkpointStorage": {}}, 400, "runId"),
    ("POST", "/api/v1/runs/start", {"runId": 99}, 404, "trial 99 not found"),
    ("POST", "/task-logs", {"task_id": "x"}, 400, "array"),
    ("POST", "/task-logs", [{"task_id": "nope", "log": "x"}], 404, "task nope not found"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "words"), ERRORS,
                         ids=[f"{m} {p} {json.dumps(b)[:40]}" for m, p, b, _, _ in ERRORS])
async def test_bad_input_is_a_clear_4xx(
    api: Api, tmp_path: Path, method: str, path: str, body: Any, status: int, words: str
) -> None:
    exp_id = (await new_experiment(api, tmp_path))["experiment"]["id"]
    trial_id = (await new_trial(api, exp_id))["id"]
    path = path.replace("@trial", str(trial_id))
    text = json.dumps(body).replace('"@exp"', str(exp_id))
    resp = await api.client.request(method, path, data=text, headers=api.headers())
    assert resp.status == status, await resp.text()
    message = (await resp.json())["message"]
    assert words in message, message
    assert (await api.call("GET", f"/api/v1/trials/{trial_id}"))["trial"]["state"] == (
        "STATE_PAUSED")
