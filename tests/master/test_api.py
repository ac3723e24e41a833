"""The REST API: auth, Determined shapes, and bad input that must get 4xx, never a crash."""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dettui.master.settings import MasterSettings
from tests.master.conftest import SIMPLE_CONFIG, TEST_MINT, Api, agent_headers, allocate, ckpt_uuid
from tests.poll import until_async


async def create(api: Api, config: str = SIMPLE_CONFIG) -> dict:
    content = base64.b64encode(b"print('hi')\n").decode()
    files = [{"path": "train.py", "type": 48, "content": content, "mtime": "1700000000",
              "mode": 33188, "uid": 0, "gid": 0}]
    return await api.call("POST", "/api/v1/experiments",
                          {"config": config, "modelDefinition": files, "activate": True})


async def test_only_info_login_and_master_need_no_token(api: Api) -> None:
    info = await api.call("GET", "/info", headers={})
    assert info["version"] == "0.38.1"
    await api.call("GET", "/api/v1/experiments", headers={}, status=401)
    master = await api.call("GET", "/api/v1/master", headers={})  # WIRE §1: the CLI reads it
    for key in ("clusterId", "clusterName", "masterId", "version", "hasCustomLogo",
                "strictJobQueueControl"):
        assert key in master


@pytest.mark.parametrize("path", ["/api/v1/experiments", "/api/v1/me", "/api/v1/agents",
                                  "/api/v1/job-queues-v2", "/api/v1/resource-pools"])
async def test_every_other_endpoint_needs_a_token(api: Api, path: str) -> None:
    body = await api.call("GET", path, headers={}, status=401)
    assert body["error"]["reason"] == "Unauthenticated"
    await api.call("GET", path, headers={"Authorization": "Bearer nope"}, status=401)


async def test_login_rules(api: Api) -> None:
    bad = await api.call("POST", "/api/v1/auth/login", {"username": "admin", "password": "x"},
                         headers={}, status=401)
    assert bad["error"]["error"] == "invalid credentials"
    await api.call("POST", "/api/v1/auth/login", {"username": "ghost", "password": ""},
                   headers={}, status=401)
    ok = await api.call("POST", "/api/v1/auth/login",
                        {"username": "admin", "password": "", "isHashed": True}, headers={})
    assert ok["user"] == {**ok["user"], "username": "admin", "admin": True, "active": True}
    me = await api.call("GET", "/api/v1/me", headers=api.headers(ok["token"]))
    assert me["user"]["username"] == "admin"


async def test_create_list_get_experiment(api: Api) -> None:
    created = await create(api)
    exp = created["experiment"]
    assert exp["id"] == 1 and exp["state"] == "STATE_ACTIVE" and exp["numTrials"] == 1
    assert created["config"]["max_restarts"] == 5
    listed = await api.call("GET", "/api/v1/experiments?archived=false&limit=200&offset=0"
                                   "&users=determined")
    assert [e["id"] for e in listed["experiments"]] == [1]
    assert listed["pagination"] == {"offset": 0, "limit": 200, "startIndex": 0, "endIndex": 1,
                                    "total": 1}
    trials = await api.call("GET", "/api/v1/experiments/1/trials")
    assert trials["trials"][0]["hparams"] == {"lr": 0.1}
    assert trials["trials"][0]["state"] == "STATE_QUEUED"
    jobs = await api.call("GET", "/api/v1/job-queues-v2?limit=100&offset=0&orderBy=ORDER_BY_ASC")
    job = jobs["jobs"][0]["full"]
    assert (job["summary"], job["priority"], job["requestedSlots"], job["allocatedSlots"]) == (
        {"state": "STATE_QUEUED", "jobsAhead": 0}, 42, 1, 0)


async def test_bad_config_is_a_400_naming_the_field(api: Api) -> None:
    body = await api.call("POST", "/api/v1/experiments",
                          {"config": SIMPLE_CONFIG + "resources: {slots_per_trial: -1}\n",
                           "modelDefinition": []}, status=400)
    assert "resources.slots_per_trial" in body["message"]


async def test_unknown_ids_are_404(api: Api) -> None:
    for path in ("/api/v1/experiments/99", "/api/v1/trials/99",
                 f"/api/v1/checkpoints/{ckpt_uuid(99)}", "/api/v1/experiments/99/trials"):
        body = await api.call("GET", path, status=404)
        assert body["message"]


async def test_every_404_under_api_v1_is_logged_on_one_line(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """A client asking for a route the master lacks leaves a line in its log (the compat
    tests fail on such lines from the real package)."""
    caplog.set_level(logging.INFO, logger="dettui.master")
    await api.call("POST", "/api/v1/no-such/route%0Ainjected", status=404,
                   headers={**api.headers(), "User-Agent": "python-requests/2.32\tx"})
    await api.call("GET", "/api/v1/trials/99", status=404)
    await api.call("GET", "/api/v1/openapi.json")  # found
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("404 ")]
    assert len(lines) == 2, lines
    assert lines[0] == "404 POST /api/v1/no-such/route%0Ainjected (python-requests/2.32\\tx)"
    assert lines[1].startswith("404 GET /api/v1/trials/99 (Python/"), lines


BAD_BODIES = [
    ("POST", "/api/v1/experiments", b"{not json"),
    ("POST", "/api/v1/experiments", b"[1, 2]"),
    ("POST", "/api/v1/experiments", b'{"config": 5}'),
    ("POST", "/api/v1/experiments", b'{"config": "name: x", "modelDefinition": "nope"}'),
    ("POST", "/api/v1/experiments",
     b'{"config": "name: x", "modelDefinition": [{"path": "../x", "type": 48, "content": "",'
     b' "mtime": "1", "mode": 1, "uid": 0, "gid": 0}]}'),
    ("POST", "/api/v1/auth/login", b'{"username": 5}'),
    ("POST", "/api/v1/auth/login", b"\xff\xfe"),
    ("POST", "/api/v1/trials/1/metrics", b'{"group": "training", "metrics": "x"}'),
    ("POST", "/api/v1/trials/1/metrics",
     b'{"group": "a.b", "metrics": {"trialId": 1, "trialRunId": 0, "stepsCompleted": 1,'
     b' "metrics": {"avgMetrics": {}}}}'),
    ("POST", "/api/v1/trials/1/progress", b'{"progress": "half"}'),
    ("POST", "/api/v1/trials/1/progress", b'{"progress": 2}'),
    ("POST", "/api/v1/checkpoints", b'{"uuid": 1}'),
    ("PATCH", "/api/v1/checkpoints", b'{"checkpoints": 3}'),
    ("POST", "/api/v1/job-queues", b'{"updates": [{"jobId": 1}]}'),
    ("POST", "/api/v1/job-queues", b'{"updates": "x"}'),
    ("PATCH", "/api/v1/experiments/1", b'{"resources": {"priority": 500}}'),
    ("POST", "/api/v1/agents/register", b'{"id": "a", "slots": "many"}'),
    ("POST", "/api/v1/agents/a/heartbeat", b'{"runningAllocations": 7}'),
    ("GET", "/api/v1/trials/abc", b""),
    ("GET", "/api/v1/checkpoints/nope", b""),
    ("GET", "/api/v1/experiments?offset=x", b""),
    ("GET", "/api/v1/experiments?offset=999", b""),
    ("GET", "/api/v1/allocations/x/signals/preemption?timeout_seconds=soon", b""),
]


@pytest.mark.parametrize(("method", "path", "raw"), BAD_BODIES,
                         ids=[f"{m} {p} {r[:20]!r}" for m, p, r in BAD_BODIES])
async def test_malformed_input_gets_4xx_and_the_master_stays_up(
    api: Api, method: str, path: str, raw: bytes
) -> None:
    await create(api)
    resp = await api.client.request(method, path, data=raw, headers=api.headers())
    assert 400 <= resp.status < 500, await resp.text()
    body = await resp.json()
    assert isinstance(body["message"], str) and body["message"]
    assert (await api.call("GET", "/info", headers={}))["version"] == "0.38.1"


async def test_metrics_merge_and_run_id_rules(api: Api) -> None:
    await create(api)
    _, token = await allocate(api, 1)  # a trial's reports come from its allocation
    body = {"group": "training", "metrics": {"trialId": 1, "trialRunId": 5, "stepsCompleted": 1,
                                             "metrics": {"avgMetrics": {"loss": 1.0}}}}
    bad = await api.call("POST", "/api/v1/trials/1/metrics", body, status=400,
                         headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    assert bad["message"] == "invalid run id, 5 (reported) != 1 (expected)"


async def test_pagination_offset_bounds(api: Api) -> None:
    await create(api)
    await create(api)
    page = await api.call("GET", "/api/v1/experiments?limit=1&offset=1")
    assert [e["id"] for e in page["experiments"]] == [2]
    assert page["pagination"]["endIndex"] == 2 and page["pagination"]["total"] == 2


async def test_allocation_tokens_reach_only_their_own_trial(api: Api) -> None:

    await create(api)
    await create(api)
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    mine = await api.call("GET", "/api/v1/trials/1", headers=task)
    assert mine["trial"]["id"] == 1
    denied = await api.call("GET", "/api/v1/trials/2", headers=task, status=403)
    assert "not valid for trial 2" in denied["message"]
    body = {"group": "training", "metrics": {"trialId": 2, "trialRunId": 0, "stepsCompleted": 1,
                                             "metrics": {"avgMetrics": {"loss": 1.0}}}}
    await api.call("POST", "/api/v1/trials/2/metrics", body, headers=task, status=403)
    await api.call("GET", "/api/v1/experiments", headers=task, status=403)
    await api.call("POST", "/api/v1/experiments/2/kill", headers=task, status=403)
    ok = {"group": "training", "metrics": {"trialId": 1, "trialRunId": 1, "stepsCompleted": 1,
                                           "metrics": {"avgMetrics": {"loss": 1.0}}}}
    await api.call("POST", "/api/v1/trials/1/metrics", ok, headers=task)
    await api.call("POST", "/api/v1/trials/1/metrics", ok, headers=task)  # a retry is accepted
    clash = {**ok, "metrics": {**ok["metrics"], "metrics": {"avgMetrics": {"loss": 2.0}}}}
    bad = await api.call("POST", "/api/v1/trials/1/metrics", clash, headers=task, status=400)
    assert bad["message"] == ("overwriting existing metric keys is not supported, conflicting "
                              "key: loss")
    pre = await api.call("GET", f"/api/v1/allocations/{alloc.id}/signals/preemption"
                                "?timeout_seconds=0", headers=task)
    assert pre == {"preempt": False}
    await api.call("GET", "/api/v1/allocations/other.1/signals/preemption?timeout_seconds=0",
                   headers=task, status=403)


async def test_trial_workloads_as_det_describe_reads_them(api: Api) -> None:
    """GetTrialWorkloads: training and validation reports and checkpoints, by batches or by a
    metric, filtered, paginated; unknown trials and filters are clear errors."""

    await create(api)
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    for group, steps, loss in [("training", 5, 0.9), ("training", 10, 0.6),
                               ("validation", 5, 0.7), ("validation", 10, 0.4)]:
        await api.call("POST", "/api/v1/trials/1/metrics", {"group": group, "metrics": {
            "trialId": 1, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"loss": loss}, "batchMetrics": [{"loss": loss}]}}},
            headers=task)
    task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    await api.call("POST", "/api/v1/checkpoints", {
        "uuid": ckpt_uuid(10), "taskId": task_id, "allocationId": alloc.id,
        "reportTime": "2026-11-22T04:56:55+00:00", "resources": {"metadata.json": "24"},
        "metadata": {"steps_completed": 10}, "state": "STATE_COMPLETED", "training": {},
        "storageId": None}, headers=task)

    def shape(workloads: list[dict]) -> list[tuple[str, int]]:
        return [(kind, w["totalBatches"]) for wl in workloads for kind, w in wl.items()]

    every = await api.call("GET", "/api/v1/trials/1/workloads")
    assert sorted(shape(every["workloads"])) == [
        ("checkpoint", 10), ("training", 5), ("training", 10), ("validation", 5),
        ("validation", 10)]
    assert [b for _, b in shape(every["workloads"])] == [5, 5, 10, 10, 10]
    assert every["pagination"]["total"] == 5 and every["pagination"]["endIndex"] == 5
    ckpt = next(w["checkpoint"] for w in every["workloads"] if "checkpoint" in w)
    assert ckpt["uuid"] == ckpt_uuid(10) and ckpt["state"] == "STATE_COMPLETED"
    val = next(w["validation"] for w in every["workloads"] if "validation" in w)
    assert val["metrics"]["avgMetrics"] == {"loss": 0.7} and "batchMetrics" not in val["metrics"]
    best = await api.call("GET", "/api/v1/trials/1/workloads?sortKey=loss"
                                 "&metricType=METRIC_TYPE_VALIDATION&filter=FILTER_OPTION_VALIDATION"
                                 "&includeBatchMetrics=true")
    assert [w["validation"]["metrics"]["avgMetrics"]["loss"] for w in best["workloads"]] == [
        0.4, 0.7]
    assert best["workloads"][0]["validation"]["metrics"]["batchMetrics"] == [{"loss": 0.4}]
    page = await api.call("GET", "/api/v1/trials/1/workloads?orderBy=ORDER_BY_DESC&limit=2"
                                 "&offset=1")
    assert [b for _, b in shape(page["workloads"])] == [10, 10]
    assert page["pagination"] == {"offset": 1, "limit": 2, "startIndex": 1, "endIndex": 3,
                                  "total": 5}
    only = await api.call("GET", "/api/v1/trials/1/workloads?filter=FILTER_OPTION_CHECKPOINT")
    assert shape(only["workloads"]) == [("checkpoint", 10)]
    bad = await api.call("GET", "/api/v1/trials/1/workloads?filter=nope", status=400)
    assert "filter" in bad["message"] and "FILTER_OPTION_CHECKPOINT" in bad["message"]
    await api.call("GET", "/api/v1/trials/99/workloads", status=404)


async def test_delete_an_ended_experiment_with_its_files_and_records(api: Api,
                                                                     tmp_path: Path) -> None:

    storage = tmp_path / "ckpts"
    config = SIMPLE_CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: {storage}}}\n"
    await create(api, config)
    await create(api, config)  # a neighbour that must keep everything
    for trial_id in (1, 2):
        alloc, alloc_token = await allocate(api, trial_id, "agent-x", [0])
        task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
        await api.call("POST", f"/api/v1/trials/{trial_id}/metrics", {"group": "training",
                       "metrics": {"trialId": trial_id, "trialRunId": 1, "stepsCompleted": 5,
                                   "metrics": {"avgMetrics": {"loss": 1.0}}}}, headers=task)
        task_id = (await api.call("GET", f"/api/v1/trials/{trial_id}"))["trial"]["taskId"]
        (storage / ckpt_uuid(trial_id)).mkdir(parents=True)
        (storage / ckpt_uuid(trial_id) / "model.pt").write_bytes(b"w" * 10)
        await api.call("POST", "/api/v1/checkpoints", {
            "uuid": ckpt_uuid(trial_id), "taskId": task_id, "allocationId": alloc.id,
            "reportTime": "2026-11-22T04:56:55+00:00", "resources": {"model.pt": "10"},
            "metadata": {"steps_completed": 5}, "state": "STATE_COMPLETED", "training": {},
            "storageId": None}, headers=task)
    refused = await api.call("DELETE", "/api/v1/experiments/1", status=400)
    assert "only an ended experiment" in refused["message"] and "ACTIVE" in refused["message"]
    assert (storage / ckpt_uuid(1) / "model.pt").exists(), "a refused delete touches nothing"
    await api.call("POST", "/api/v1/experiments/1/kill")
    for _ in range(100):
        state = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]["state"]
        if state == "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    assert state == "STATE_CANCELED", state
    await api.call("DELETE", "/api/v1/experiments/1")
    await api.call("GET", "/api/v1/experiments/1", status=404)
    await api.call("GET", "/api/v1/trials/1", status=404)
    await api.call("GET", "/api/v1/trials/1/workloads", status=404)
    assert not (storage / ckpt_uuid(1)).exists(), "its checkpoint files are gone"
    assert (storage / ckpt_uuid(2) / "model.pt").exists(), "the neighbour's are not"
    assert [c["uuid"] for c in (await api.call("GET", "/api/v1/experiments/2/checkpoints"))[
        "checkpoints"]] == [ckpt_uuid(2)]
    assert len((await api.call("GET", "/api/v1/trials/2/metrics"))["metrics"]) == 1
    await api.call("DELETE", "/api/v1/experiments/1", status=404)


async def test_users_list_for_det_user_list(api: Api) -> None:
    listed = await api.call("GET", "/api/v1/users")
    assert [u["username"] for u in listed["users"]] == ["admin", "determined"]
    assert listed["pagination"]["total"] == 2
    assert all("passwordHash" not in u and "password_hash" not in u for u in listed["users"])
    admin = next(u for u in listed["users"] if u["username"] == "admin")
    assert admin["admin"] is True and admin["active"] is True
    assert (await api.call("GET", f"/api/v1/users/{admin['id']}"))["user"]["username"] == "admin"
    assert (await api.call("GET", "/api/v1/users?active=false"))["users"] == []
    await api.call("GET", "/api/v1/users/999", status=404)
    await api.call("GET", "/api/v1/users", headers={}, status=401)


async def test_an_exit_recorded_just_before_a_crash_ends_the_trial(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    """A part's exit and the allocation's end are two commits. Killed between them, a master
    must end the allocation when it comes back: the agent will not report it again."""
    from dettui.master.app import create_app
    from dettui.master.http import appkeys
    from dettui.master.store import trials as trial_store
    from dettui.master.store.db import connect
    from dettui.models import AllocationState, TrialState

    settings = master_settings
    first = await aiohttp_client(create_app(settings))
    resp = await first.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    api = Api(first, (await resp.json())["token"])
    await create(api)
    await api.client.close()
    conn = connect(settings.db_target)  # what the killed master had committed
    alloc = trial_store.allocate(conn, 1, "agent-x", [0], mint=TEST_MINT)
    assert alloc is not None
    # what an older master committed apart: the part's exit, not yet the allocation's end
    conn.execute("UPDATE allocations SET part_exits=? WHERE id=?",
                 ('{"agent-x": [0, ""]}', alloc.id))
    conn.close()

    second = await aiohttp_client(create_app(settings))
    db = second.server.app[appkeys.DB]
    assert (await db.run(trial_store.allocation, alloc.id)).state is AllocationState.EXITED
    assert (await db.run(trial_store.get, 1)).state is TrialState.COMPLETED
    exp = await Api(second, api.token).call("GET", "/api/v1/experiments/1")
    assert exp["experiment"]["state"] == "STATE_COMPLETED"


async def test_ids_are_never_given_twice(api: Api) -> None:
    """Deleting the newest experiment does not free its id (nor its trials' ids)."""
    await create(api)
    await create(api)
    await api.call("POST", "/api/v1/experiments/2/kill")
    for _ in range(100):
        if (await api.call("GET", "/api/v1/experiments/2"))["experiment"]["state"] == \
                "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    await api.call("DELETE", "/api/v1/experiments/2")
    third = (await create(api))["experiment"]
    assert third["id"] == 3
    trials = (await api.call("GET", "/api/v1/experiments/3/trials"))["trials"]
    assert [t["id"] for t in trials] == [3]


@pytest.mark.parametrize("path", [
    "/api/v1/experiments/99999999999999999999999", "/api/v1/experiments/+1",
    "/api/v1/experiments/%201", "/api/v1/experiments/%D9%A1", "/api/v1/trials/-1",
    "/api/v1/experiments?offset=%2B1", "/api/v1/experiments?limit=%D9%A1",
    "/api/v1/experiments?offset=99999999999999999999999",
    "/api/v1/agents/a/work?timeout_seconds=nan", "/api/v1/agents/a/work?timeout_seconds=inf",
    "/api/v1/allocations/x/signals/preemption?timeout_seconds=-inf",
    "/api/v1/trials/1/logs?rankIds=%2B1",
])
async def test_ids_and_numbers_are_plain_and_in_range(api: Api, path: str) -> None:
    """`+1`, ` 1`, `١` and ids beyond 64 bits are 400s (they were 500s or read as 1), and a
    NaN timeout is refused instead of waiting forever."""
    await create(api)
    headers = await agent_headers(api) if path.startswith("/api/v1/agents/") else None
    if headers is not None:  # a credential speaks only for the agent it registered as
        await api.call("POST", "/api/v1/agents/register",
                       {"id": "a", "slots": [{"id": 0, "type": "cpu"}]}, headers=headers)
    body = await api.call("GET", path, status=400, headers=headers)
    assert "expected" in body["message"]


async def test_priority_and_weight_have_one_rule_and_one_home(api: Api) -> None:
    """The config and both API paths refuse the same values (a bool is not a priority), and
    the config shows what job updates set: the columns are the one home."""
    exp = (await create(api))["experiment"]
    job = exp["jobId"]
    for bad in (True, 0, 100, 7.5, "7"):
        await api.call("PATCH", "/api/v1/experiments/1", {"resources": {"priority": bad}},
                       status=400)
        body = await api.call("POST", "/api/v1/job-queues", {"updates": [
            {"jobId": job, "priority": bad}]}, status=400)
        assert "priority: must be an integer from 1 to 99" in body["message"], body
    await api.call("PATCH", "/api/v1/experiments/1", {"resources": {"weight": False}},
                   status=400)
    await api.call("POST", "/api/v1/job-queues", {"updates": [{"jobId": job, "priority": 7}]})
    got = await api.call("GET", "/api/v1/experiments/1")
    assert got["config"]["resources"]["priority"] == 7
    assert got["experiment"]["config"]["resources"]["priority"] == 7
    jobs = (await api.call("GET", "/api/v1/job-queues-v2"))["jobs"]
    assert [j["full"]["priority"] for j in jobs if j["full"]["jobId"] == job] == [7]
    await api.call("PATCH", "/api/v1/experiments/1", {"resources": {"priority": 9}})
    got = await api.call("GET", "/api/v1/experiments/1")
    assert got["config"]["resources"]["priority"] == 9


async def _job_states(api: Api) -> dict[str, str]:
    jobs = (await api.call("GET", "/api/v1/job-queues-v2"))["jobs"]
    return {j["full"]["name"]: j["full"]["summary"]["state"] for j in jobs}


async def _until_states(api: Api, want: dict[str, str]) -> None:
    await until_async(lambda: _job_states(api), f"job states {want}", timeout=10,
                      done=lambda got: all(got.get(k) == v for k, v in want.items()))


@pytest.mark.parametrize("preemption", [False, True])
async def test_only_jobs_started_by_backfilling_are_scheduled_backfilled(
        master_settings: MasterSettings, aiohttp_client: Any, preemption: bool) -> None:
    """Determined's rule: SCHEDULED_BACKFILLED marks a task the scheduler started around a
    more urgent job that could not start (it does that only with preemption on); a job that
    started first stays SCHEDULED when a more urgent one queues ahead of it."""
    from dettui.master.app import create_app
    from dettui.master.scheduler import PoolPolicy

    settings = replace(master_settings, policies={"default": PoolPolicy(preemption=preemption)})
    client = await aiohttp_client(create_app(settings))
    resp = await client.post("/api/v1/auth/login", json={"username": "determined"})
    api = Api(client, (await resp.json())["token"])
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0}, {"id": 1}], "runningAllocations": []}, headers=agent)
    await create(api, SIMPLE_CONFIG.replace("name: t", "name: first") +
                 "resources: {priority: 50}\n")
    await _until_states(api, {"first": "STATE_SCHEDULED"})
    await create(api, SIMPLE_CONFIG.replace("name: t", "name: urgent") +
                 "resources: {slots_per_trial: 2, priority: 5}\n")  # waits ahead of it
    await _until_states(api, {"urgent": "STATE_QUEUED", "first": "STATE_SCHEDULED"})
    if preemption:  # the pass that asks `first` to make room has run
        from dettui.master.http import appkeys

        hub = client.server.app[appkeys.CLUSTER].dispatcher
        for _ in range(100):
            if hub.preempting:
                break
            await asyncio.sleep(0.05)
        assert hub.preempting
    await create(api, SIMPLE_CONFIG.replace("name: t", "name: filler") +
                 "resources: {priority: 60}\n")  # starts around the urgent job, if at all
    await _until_states(api, {"urgent": "STATE_QUEUED", "first": "STATE_SCHEDULED",
                              "filler": "STATE_SCHEDULED_BACKFILLED" if preemption
                              else "STATE_QUEUED"})


async def test_nan_validations_are_stored_and_never_best(api: Api) -> None:
    """A diverged trial reports NaN: stored and shown as NaN, never an experiment's or trial's
    best, and nothing that reads validations fails on it (SQLite's JSON refuses NaN)."""

    await create(api)
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    for steps, value in ((1, "NaN"), (2, 0.5), (3, "Infinity")):
        await api.call("POST", "/api/v1/trials/1/metrics", {"group": "validation", "metrics": {
            "trialId": 1, "trialRunId": alloc.run_id, "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"loss": value}}}}, headers=task)
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert trial["bestValidation"]["metrics"]["avgMetrics"]["loss"] == 0.5
    for path in ("/api/v1/experiments/1", "/api/v1/experiments?limit=10"):
        body = await api.call("GET", path)
        exp = body["experiment"] if "experiment" in body else body["experiments"][0]
        assert (exp["bestTrialId"], exp["bestTrialSearcherMetric"]) == (1, 0.5), exp
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    assert [m["metrics"]["avgMetrics"]["loss"] for m in rows] == ["NaN", 0.5, "Infinity"]


async def test_a_body_cut_short_by_a_lost_connection_is_a_client_error() -> None:
    """An agent stopped mid-POST: the body ends in a lost connection. That is the client's
    doing, a 400 (not an internal error with a traceback in the master's log)."""
    from unittest import mock

    from aiohttp import streams
    from aiohttp.test_utils import make_mocked_request

    from dettui.errors import InvalidArgument
    from dettui.master.http.body import read_body

    payload = streams.StreamReader(mock.Mock(_reading_paused=False), 2 ** 16,
                                   loop=asyncio.get_running_loop())
    payload.feed_data(b'[{"a":')
    payload.set_exception(ConnectionResetError("Connection lost"))
    request = make_mocked_request("POST", "/api/v1/agents/a/logs", payload=payload,
                                  match_info={})
    with pytest.raises(InvalidArgument, match="cut short"):
        await read_body(request)


async def test_a_pool_counts_the_slots_its_running_trials_hold(api: Api) -> None:
    """GET /api/v1/resource-pools' slotsUsed: the slots the live allocations hold on the pool's
    agents (read from the allocations' slot columns, as the agents list reads them), the same
    count the agents list shows in use."""
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": i} for i in range(4)], "runningAllocations": []},
        headers=agent)
    await create(api, SIMPLE_CONFIG.replace("name: t", "name: two") +
                 "resources: {slots_per_trial: 2}\n")
    await create(api, SIMPLE_CONFIG.replace("name: t", "name: one"))
    await _until_states(api, {"two": "STATE_SCHEDULED", "one": "STATE_SCHEDULED"})
    pools = (await api.call("GET", "/api/v1/resource-pools"))["resourcePools"]
    assert [(p["name"], p["slotsUsed"], p["slotsAvailable"]) for p in pools] == [
        ("default", 3, 4)]
    agents = (await api.call("GET", "/api/v1/agents"))["agents"]
    assert sum(1 for s in agents[0]["slots"].values() if s.get("container")) == 3
