"""Every route that takes a path-like value: checkpoint uuids are UUIDs, and nothing the master
removes lies outside the checkpoint storage (the host-deletion bug: `uuid: "/srv/data"`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dettui.master.http import appkeys
from tests.master.conftest import SIMPLE_CONFIG, Api, allocate, ckpt_uuid
from tests.master.test_api import create

HOSTILE = ["/srv/data", "../../data", "..", ".", "", "a/b", "..\\x", "x\x00y",
           ckpt_uuid(1) + "/..", "0B6E7C5E-3A1F-4D2B-9C1E-2F8A4B6D9E01", "{" + ckpt_uuid(1) + "}",
           "urn:uuid:" + ckpt_uuid(1), "c" * 5000]


class Setup:
    def __init__(self, api: Api, storage: Path, victim: Path) -> None:
        self.api, self.storage, self.victim = api, storage, victim
        self.task: dict[str, str] = {}
        self.task_id = ""
        self.alloc_id = ""

    def body(self, uuid: Any, steps: int = 5) -> dict[str, Any]:
        return {"uuid": uuid, "taskId": self.task_id, "allocationId": self.alloc_id,
                "reportTime": "2026-11-22T04:56:55+00:00", "resources": {"model.pt": "10"},
                "metadata": {"steps_completed": steps}, "state": "STATE_COMPLETED",
                "training": {}, "storageId": None}


@pytest.fixture
async def setup(api: Api, tmp_path: Path) -> Setup:
    storage = tmp_path / "ckpts"
    victim = tmp_path / "victim"
    (victim / "data").mkdir(parents=True)
    (victim / "data" / "precious.txt").write_text("keep me")
    await create(api, SIMPLE_CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: "
                                      f"{storage}, save_trial_best: 0, save_trial_latest: 0}}\n")
    s = Setup(api, storage, victim)
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    s.task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    s.task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    s.alloc_id = alloc.id
    return s


def intact(victim: Path) -> bool:
    return (victim / "data" / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("uuid", HOSTILE, ids=[repr(u)[:30] for u in HOSTILE])
async def test_reported_uuids_must_be_uuids(setup: Setup, uuid: str) -> None:
    for headers in (setup.task, None):  # an allocation token, and a logged-in user
        body = await setup.api.call("POST", "/api/v1/checkpoints", setup.body(uuid), status=400,
                                    headers=headers)
        assert "must be a UUID" in body["message"]
    assert (await setup.api.call("GET", "/api/v1/experiments/1/checkpoints"))[
        "checkpoints"] == []


async def test_uuid_routes_refuse_hostile_values_without_a_5xx(setup: Setup) -> None:
    await setup.api.call("POST", "/api/v1/checkpoints", setup.body(ckpt_uuid(1)),
                         headers=setup.task)
    for raw in ("..%2F..%2Fetc", "%2Fsrv%2Fdata", "..", "%00", "x" * 3000,
                "0B6E7C5E-3A1F-4D2B-9C1E-2F8A4B6D9E01"):
        resp = await setup.api.client.get(f"/api/v1/checkpoints/{raw}",
                                          headers=setup.api.headers())
        assert resp.status in (400, 404), (raw, resp.status, await resp.text())
    # PATCH is all or nothing: one bad uuid and no record changes
    patch = {"checkpoints": [{"uuid": ckpt_uuid(1), "resources": {"resources": {}}},
                             {"uuid": "../../victim", "resources": {"resources": {}}}]}
    body = await setup.api.call("PATCH", "/api/v1/checkpoints", patch, status=400)
    assert "checkpoints[1].uuid" in body["message"]
    patch["checkpoints"][1]["uuid"] = ckpt_uuid(99)
    await setup.api.call("PATCH", "/api/v1/checkpoints", patch, status=404)
    ckpt = (await setup.api.call("GET", f"/api/v1/checkpoints/{ckpt_uuid(1)}"))["checkpoint"]
    assert ckpt["state"] == "STATE_COMPLETED"


@pytest.mark.parametrize("uuid", HOSTILE[:9], ids=[repr(u)[:30] for u in HOSTILE[:9]])
async def test_delete_and_download_refuse_hostile_uuids(setup: Setup, uuid: str) -> None:
    """DELETE /api/v1/checkpoints and the master's tar download take uuids too: refused before
    any path is made of them, the target directory intact."""
    setup.storage.mkdir(parents=True, exist_ok=True)
    await setup.api.call("POST", "/api/v1/checkpoints", setup.body(ckpt_uuid(1)),
                         headers=setup.task)
    body = await setup.api.call("DELETE", "/api/v1/checkpoints",
                                {"checkpointUuids": [uuid]}, status=400)
    assert "must be a UUID" in body["message"]
    quoted = uuid.replace("/", "%2F").replace("\x00", "%00") or "%20"
    resp = await setup.api.client.get(f"/checkpoints/{quoted}", headers=setup.api.headers())
    assert resp.status in (400, 404), (uuid, resp.status, await resp.text())
    assert intact(setup.victim)
    ckpt = (await setup.api.call("GET", f"/api/v1/checkpoints/{ckpt_uuid(1)}"))["checkpoint"]
    assert ckpt["state"] == "STATE_COMPLETED"


async def test_checkpoint_storage_cannot_reach_into_the_state_dir(api: Api) -> None:
    """Trials are given their storage (mounted, kept through the sandbox) and GC deletes under
    it: the master's state dir is refused as storage, but for its own checkpoint root."""
    state = api.client.server.app[appkeys.SETTINGS].state_dir
    for storage in (f"{{type: shared_fs, host_path: {state}}}",
                    f"{{type: shared_fs, host_path: {state.parent}}}",
                    f"{{type: shared_fs, host_path: {state}/agent}}",
                    f"{{type: directory, container_path: {state}}}",
                    f"{{type: shared_fs, host_path: {state}/checkpoints, storage_path: ..}}"):
        body = await api.call("POST", "/api/v1/experiments", {
            "config": SIMPLE_CONFIG + f"checkpoint_storage: {storage}\n",
            "modelDefinition": [], "activate": False}, status=400)
        assert "checkpoint_storage" in body["message"], (storage, body)
    relative = await api.call("POST", "/api/v1/experiments", {
        "config": SIMPLE_CONFIG + "checkpoint_storage: {type: shared_fs, host_path: /tmp/x, "
                                  "storage_path: ../../etc}\n",
        "modelDefinition": [], "activate": False}, status=400)
    assert "storage_path: must be under host_path" in relative["message"]
    await create(api, SIMPLE_CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: "
                                      f"{state}/checkpoints/mine}}\n")


async def test_a_uuid_of_another_trials_checkpoint_is_refused(setup: Setup) -> None:
    await setup.api.call("POST", "/api/v1/checkpoints", setup.body(ckpt_uuid(1)),
                         headers=setup.task)
    await setup.api.call("POST", "/api/v1/checkpoints", setup.body(ckpt_uuid(1)),
                         headers=setup.task)  # a client retry is fine
    await create(setup.api)
    other, other_token = await allocate(setup.api, 2, "agent-x", [1])
    task_id = (await setup.api.call("GET", "/api/v1/trials/2"))["trial"]["taskId"]
    body = setup.body(ckpt_uuid(1))
    body.update(taskId=task_id, allocationId=other.id)
    refused = await setup.api.call("POST", "/api/v1/checkpoints", body, status=409, headers={
        "Grpc-Metadata-x-allocation-token": f"Bearer {other_token}"})
    assert "another trial" in refused["message"]


async def _legacy_rows(setup: Setup, *uuids: str) -> None:
    """Rows written before uuids and their directories were checked: straight into the
    store (by default, three uuids that lead out of the storage)."""
    db = setup.api.client.server.app[appkeys.DB]
    uuids = uuids or (str(setup.victim), "../victim", "../victim/data")

    def insert(conn: Any) -> None:
        for i, uuid in enumerate(uuids):
            conn.execute(
                "INSERT INTO checkpoints (uuid, trial_id, experiment_id, task_id, allocation_id,"
                " report_time, state, resources, metadata, steps_completed) "
                "VALUES (?, 1, 1, ?, ?, ?, 'STATE_COMPLETED', '{}', ?, ?)",
                (uuid, setup.task_id, setup.alloc_id, 1000.0 + i,
                 json.dumps({"steps_completed": i}), i))

    await db.run(insert)


async def _ended(api: Api) -> None:
    await api.call("POST", "/api/v1/experiments/1/kill")
    for _ in range(100):
        exp = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]
        if exp["state"] == "STATE_CANCELED":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(exp["state"])


async def test_gc_and_delete_never_leave_the_storage(setup: Setup) -> None:
    """The review's case: absolute and `..` uuids in the store, a policy GC that deletes
    everything, then delete of the experiment. The target directory stays intact."""
    setup.storage.mkdir(parents=True)
    await _legacy_rows(setup)
    link = setup.storage / ckpt_uuid(7)  # a valid uuid whose directory is a symlink out
    link.symlink_to(setup.victim / "data", target_is_directory=True)
    real = setup.storage / ckpt_uuid(8)
    real.mkdir()
    (real / "model.pt").write_bytes(b"w")
    refused = await setup.api.call("POST", "/api/v1/checkpoints", setup.body(ckpt_uuid(7), 7),
                                   headers=setup.task, status=403)
    assert "not a directory" in refused["message"]  # a report of a link is refused now...
    await _legacy_rows(setup, ckpt_uuid(7))  # ...but a row from before may be in the store
    await setup.api.call("POST", "/api/v1/checkpoints", setup.body(ckpt_uuid(8), 8),
                         headers=setup.task)
    await setup.api.call("PATCH", "/api/v1/experiments/1", {"checkpointStorage": {
        "saveExperimentBest": 0, "saveTrialBest": 0, "saveTrialLatest": 0}})
    assert intact(setup.victim)
    assert not link.exists() and not link.is_symlink(), "the link itself was removed"
    assert not real.exists()
    await _ended(setup.api)
    await setup.api.call("DELETE", "/api/v1/experiments/1")
    assert intact(setup.victim)
    assert setup.victim.parent.joinpath("victim").is_dir()
