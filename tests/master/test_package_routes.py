"""Routes the real determined==0.38.1 package calls beyond the basics, checked as the master
answers them (the compat tests run the package itself against them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dettui.errors import InvalidArgument
from tests.master.conftest import SIMPLE_CONFIG, Api, allocate, ckpt_uuid
from tests.master.test_api import create
from tests.master.test_auth import as_user


async def test_run_metadata_is_replaced_whole_and_read_back(api: Api) -> None:
    """`core.train.set_metadata` / `get_metadata`: Determined's rules, the trial's own
    allocation may set it (a user's token, even its owner's, may not: the cluster runs it),
    everyone may read it."""
    admin = await as_user(api, "admin")
    await create(api)  # trial 1: determined's
    await create(admin)  # trial 2: the admin's
    _, token = await allocate(api, 1)
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    assert await api.call("GET", "/api/v1/runs/1/metadata", headers=task) == {"metadata": {}}
    body = {"metadata": {"dataset": {"rows": 10, "tags": ["a", "b"]}, "note": "x"}, "runId": 1}
    set_ = await api.call("POST", "/api/v1/runs/1/metadata", body, headers=task)
    assert set_ == {"metadata": body["metadata"]}
    refused = await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": {"note": "z"}},
                             status=403)  # its owner's user token
    assert "is run by the cluster" in refused["message"]
    await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": {"note": "y"}}, headers=task)
    assert (await admin.call("GET", "/api/v1/runs/1/metadata")) == {"metadata": {"note": "y"}}
    await api.call("GET", "/api/v1/runs/2/metadata", headers=task, status=403)
    await api.call("POST", "/api/v1/runs/2/metadata", {"metadata": {}}, headers=task,
                   status=403)
    refused = await api.call("POST", "/api/v1/runs/2/metadata", {"metadata": {}}, status=403)
    assert "is run by the cluster" in refused["message"]
    await api.call("POST", "/api/v1/runs/99/metadata", {"metadata": {}}, status=404)
    await api.call("GET", "/api/v1/runs/99/metadata", status=404)
    for bad, why in [({"a.b": 1}, "can not contain"), ({"k" * 51: 1}, "key exceeds"),
                     ({"l": list(range(101))}, "array exceeds"), ({"s": "x" * 5001}, "value"),
                     (_nested(11), "nesting depth"), ({str(i): i for i in range(1001)},
                                                       "key count limit")]:
        refused = await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": bad},
                                 headers=task, status=400)
        assert why in refused["message"], (bad, refused)
    await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": {}, "runId": 2},
                   headers=task, status=400)
    await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": _nested(10)}, headers=task)
    assert (await api.call("GET", "/api/v1/runs/1/metadata"))["metadata"] == _nested(10)


def _nested(depth: int) -> dict:
    out: dict = {"leaf": 1}
    for _ in range(depth - 1):
        out = {"n": out}
    return out


async def test_the_core_api_sets_run_metadata_and_reports_an_early_exit(api: Api) -> None:
    """dettui's `core.train` (what `from determined import core` gives without the real
    package): set_metadata/get_metadata through the runs route, report_early_exit, and
    Determined's TensorBoard path."""
    from dettui import core
    from dettui.master.http import appkeys
    from dettui.master.store import trials as trial_store
    from tests.master.test_ingest import _trial_context

    train = await _trial_context(api)
    got = await asyncio.to_thread(train.set_metadata, {"epochs": 3, "tags": ["x"]})
    assert got == {"epochs": 3, "tags": ["x"]}
    assert await asyncio.to_thread(train.get_metadata) == got
    assert (await api.call("GET", "/api/v1/runs/1/metadata"))["metadata"] == got
    with pytest.raises(InvalidArgument, match="can not contain"):
        await asyncio.to_thread(train.set_metadata, {"a.b": 1})
    await asyncio.to_thread(train.report_early_exit, core.EarlyExitReason.INVALID_HP)
    trial = await api.client.server.app[appkeys.DB].run(trial_store.get, 1)
    assert trial.early_exit == "EXITED_REASON_INVALID_HP" and trial.searcher_stopped
    # the master refuses this reason, as Determined's does: a warning, not a crash
    await asyncio.to_thread(train.report_early_exit, core.EarlyExitReason.USER_REQUESTED_STOP)
    with pytest.raises(ValueError, match="no TensorBoard path"):
        train.get_tensorboard_path()
    await asyncio.to_thread(train.close)


async def _checkpoint(api: Api, trial_id: int, n: int, task: dict[str, str],
                      storage: Path | None = None, files: dict[str, bytes] | None = None) -> str:
    """Report checkpoint `ckpt_uuid(n)` of the trial (its files written to `storage` first)."""
    uuid = ckpt_uuid(n)
    files = files or {}
    if storage is not None:
        for name, data in files.items():
            (storage / uuid / name).parent.mkdir(parents=True, exist_ok=True)
            (storage / uuid / name).write_bytes(data)
    trial = (await api.call("GET", f"/api/v1/trials/{trial_id}", headers=task))["trial"]
    resources = {k: str(len(v)) for k, v in files.items()}  # as the Core API lists them
    resources.update({f"{p}/": "0" for k in files for p in Path(k).parents if str(p) != "."})
    await api.call("POST", "/api/v1/checkpoints", {
        "uuid": uuid, "taskId": trial["taskId"], "resources": resources,
        "metadata": {"steps_completed": 4, "keep": 1}}, headers=task)
    return uuid


def _task(token: str) -> dict[str, str]:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}


async def test_a_trial_using_a_checkpoint_is_found_by_its_metrics(api: Api) -> None:
    """ReportTrialSourceInfo and GetTrialMetricsByCheckpoint (the SDK's
    `Checkpoint.get_metrics()` after `report_task_using_checkpoint`)."""
    admin = await as_user(api, "admin")
    await create(api)  # trial 1 trains the checkpoint
    await create(api)  # trial 2 runs inference with it
    await create(admin)  # trial 3: the admin's
    _, t1 = await allocate(api, 1)
    _, t2 = await allocate(api, 2)
    uuid = await _checkpoint(api, 1, 1, _task(t1))
    assert (await api.call("GET", f"/api/v1/checkpoints/{uuid}/metrics")) == {"metrics": []}
    info = {"checkpointUuid": uuid, "trialId": 2,
            "trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}
    got = await api.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": info},
                         headers=_task(t2))
    assert got == {"trialId": 2, "checkpointUuid": uuid}
    await api.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": info},
                   headers=_task(t2))  # a retry
    for group, steps in (("inference", 1), ("inference", 2), ("training", 2)):
        await api.call("POST", "/api/v1/trials/2/metrics", {"group": group, "metrics": {
            "trialId": 2, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"acc": steps / 10}}}}, headers=_task(t2))
    got = await api.call("GET", f"/api/v1/checkpoints/{uuid}/metrics?metricGroup=inference"
                                "&trialSourceInfoType=TRIAL_SOURCE_INFO_TYPE_INFERENCE")
    assert [(m["trialId"], m["group"], m["totalBatches"], m["metrics"]["avg_metrics"])
            for m in got["metrics"]] == [(2, "inference", 1, {"acc": 0.1}),
                                         (2, "inference", 2, {"acc": 0.2})]
    assert len((await api.call("GET", f"/api/v1/checkpoints/{uuid}/metrics"))["metrics"]) == 3
    fine = await api.call("GET", f"/api/v1/checkpoints/{uuid}/metrics?trialSourceInfoType="
                                 "TRIAL_SOURCE_INFO_TYPE_FINE_TUNING")
    assert fine == {"metrics": []}
    # who may link: the trial's own allocation only (the cluster runs it), not another
    # trial's, nor a user's token, even its owner's or an admin's
    other = {**info, "trialId": 3}
    await api.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": other},
                   headers=_task(t2), status=403)
    await api.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": other}, status=403)
    await admin.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": other},
                     status=403)
    _, t3 = await allocate(api, 3)
    await api.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": other},
                   headers=_task(t3))
    for bad, status in [({**info, "trialSourceInfoType": "X"}, 400),
                        ({**info, "checkpointUuid": "../x"}, 400),
                        ({**info, "checkpointUuid": ckpt_uuid(99)}, 404),
                        ({**info, "trialId": 99}, 403)]:
        await api.call("POST", "/api/v1/trial-source-info", {"trialSourceInfo": bad},
                       headers=_task(t2), status=status)
    await api.call("GET", f"/api/v1/checkpoints/{ckpt_uuid(99)}/metrics", status=404)
    await api.call("GET", f"/api/v1/checkpoints/{uuid}/metrics?trialSourceInfoType=X",
                   status=400)
    # deleting the checkpoint's experiment takes the links to it along (not trial 2's metrics)
    await api.call("POST", "/api/v1/experiments/1/kill")
    for _ in range(100):
        if (await api.call("GET", "/api/v1/experiments/1"))["experiment"]["state"] == \
                "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    await api.call("DELETE", "/api/v1/experiments/1")
    assert len((await api.call("GET", "/api/v1/trials/2/metrics"))["metrics"]) == 3


async def test_checkpoint_metadata_is_replaced_by_its_owner(api: Api) -> None:
    """PostCheckpointMetadata (the SDK's add_metadata/remove_metadata)."""
    admin = await as_user(api, "admin")
    await create(admin)  # the admin's experiment
    _, token = await allocate(api, 1)
    uuid = await _checkpoint(api, 1, 1, _task(token))
    new = {"steps_completed": 4, "keep": 1, "note": {"by": "sdk"}}
    body = {"checkpoint": {"uuid": uuid, "metadata": new, "resources": {}, "training": {},
                           "state": "STATE_UNSPECIFIED"}}
    refused = await api.call("POST", f"/api/v1/checkpoints/{uuid}/metadata", body, status=403)
    assert "only the owner of checkpoint" in refused["message"]
    got = await admin.call("POST", f"/api/v1/checkpoints/{uuid}/metadata", body)
    assert got["checkpoint"]["metadata"] == new and got["checkpoint"]["uuid"] == uuid
    assert got["checkpoint"]["training"]["trialId"] == 1
    fewer = {"checkpoint": {"metadata": {"steps_completed": 4}}}
    await api.call("POST", f"/api/v1/checkpoints/{uuid}/metadata", fewer, headers=_task(token))
    ckpt = (await api.call("GET", f"/api/v1/checkpoints/{uuid}"))["checkpoint"]
    assert ckpt["metadata"] == {"steps_completed": 4} and ckpt["state"] == "STATE_COMPLETED"
    other = {"checkpoint": {"uuid": ckpt_uuid(2), "metadata": {}}}
    await admin.call("POST", f"/api/v1/checkpoints/{uuid}/metadata", other, status=400)
    await admin.call("POST", f"/api/v1/checkpoints/{ckpt_uuid(9)}/metadata", fewer, status=404)
    await admin.call("POST", "/api/v1/checkpoints/nope/metadata", fewer, status=400)


async def test_checkpoint_files_are_removed_by_glob_and_never_outside(
        api: Api, tmp_path: Path) -> None:
    """CheckpointsRemoveFiles (`det checkpoint rm`, the SDK's remove_files): what the globs
    match goes, a symlink is removed and never followed, the records follow."""
    storage, outside = tmp_path / "ckpts", tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "keep.txt").write_text("mine")
    (outside / "dir" / "keep.bin").write_text("mine")
    config = SIMPLE_CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: {storage}}}\n"
    await create(api, config)
    _, token = await allocate(api, 1)
    files = {"model.bin": b"mm", "opt.bin": b"o", "sub/a.txt": b"a", ".hidden.bin": b"h",
             "metadata.json": b"{}"}
    first = await _checkpoint(api, 1, 1, _task(token), storage, files)
    second = await _checkpoint(api, 1, 2, _task(token), storage, files)
    (storage / first / "link").symlink_to(outside / "dir")
    (storage / first / "out.txt").symlink_to(outside / "keep.txt")
    await api.call("POST", "/api/v1/checkpoints/rm", {
        "checkpointGlobs": [], "checkpointUuids": [second]})  # a refresh: nothing changed
    refreshed = (await api.call("GET", f"/api/v1/checkpoints/{second}"))["checkpoint"]
    assert refreshed["state"] == "STATE_COMPLETED"
    await api.call("POST", "/api/v1/checkpoints/rm", {
        "checkpointGlobs": ["*.bin", "**/*.txt", "link/*", "link"],
        "checkpointUuids": [first]})
    ckpt = (await api.call("GET", f"/api/v1/checkpoints/{first}"))["checkpoint"]
    assert ckpt["state"] == "STATE_PARTIALLY_DELETED"
    assert set(ckpt["resources"]) == {".hidden.bin", "metadata.json", "sub/"}
    assert sorted(p.name for p in (storage / first).iterdir()) == [
        ".hidden.bin", "metadata.json", "sub"]
    assert (outside / "keep.txt").read_text() == "mine" and (outside / "dir" / "keep.bin").exists()
    await api.call("POST", "/api/v1/checkpoints/rm", {
        "checkpointGlobs": ["**/*"], "checkpointUuids": [first, second]})
    for uuid in (first, second):
        ckpt = (await api.call("GET", f"/api/v1/checkpoints/{uuid}"))["checkpoint"]
        assert ckpt["state"] == "STATE_DELETED" and not (storage / uuid).exists()
    for globs, uuids, status in [([""], [first], 400), (["../x"], [first], 400),
                                 (["*"], ["nope"], 400), (["*"], [ckpt_uuid(7)], 404),
                                 (["*"] * 101, [first], 400)]:
        await api.call("POST", "/api/v1/checkpoints/rm",
                       {"checkpointGlobs": globs, "checkpointUuids": uuids}, status=status)
    other = await as_user(api, "admin")
    await create(other, config)
    _, token = await allocate(api, 2)
    theirs = await _checkpoint(api, 2, 3, _task(token), storage, files)
    refused = await api.call("POST", "/api/v1/checkpoints/rm", {
        "checkpointGlobs": ["*.bin"], "checkpointUuids": [theirs]}, status=403)
    assert "only the owner of checkpoint" in refused["message"]
    assert (storage / theirs / "model.bin").exists()


@pytest.mark.parametrize(("pattern", "rel", "matches"), [
    ("*.bin", "a.bin", True), ("*.bin", "d/a.bin", False), ("*.bin", ".a.bin", False),
    (".*", ".a.bin", True), ("**/*.bin", "a.bin", True), ("**/*.bin", "d/e/a.bin", True),
    ("**/*.bin", ".d/a.bin", False), ("d/", "d/", True), ("d/", "d", False),
    ("d/**", "d/", True), ("d/**", "d/e/f", True), ("[ab].txt", "b.txt", True),
    ("?.txt", "ab.txt", False), ("/a.bin", "a.bin", True), ("a//b", "a/b", True),
])
def test_glob_match_is_pythons_glob(pattern: str, rel: str, matches: bool) -> None:
    from dettui.master.checkpoint_files import glob_match

    assert glob_match(pattern, rel) is matches
