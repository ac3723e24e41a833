"""The info files the agent writes are the ones Determined's `prep_container` writes: the real
determined==0.38.1 `_info.py` reads them back field for field."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dettui.agent import runinfo

DET_VENV = os.environ.get("DETTUI_DET_VENV")
ENV = {
    "DET_MASTER": "http://10.0.0.1:8080", "DET_CLUSTER_ID": "c-1", "DET_AGENT_ID": "a-1",
    "DET_SLOT_IDS": "[0, 1]", "DET_TASK_ID": "3.abc", "DET_ALLOCATION_ID": "3.abc.2",
    "DET_SESSION_TOKEN": "tok", "DET_TASK_TYPE": "TRIAL", "DET_TRIAL_ID": "7",
    "DET_EXPERIMENT_ID": "3", "DET_TRIAL_SEED": "42", "DET_HPARAMS": '{"lr": 0.1}',
    "DET_EXPERIMENT_CONFIG": json.dumps({"debug": True, "data": {"x": 1}}),
    "DET_STEPS_COMPLETED": "20", "DET_TRIAL_RUN_ID": "2",
    "DET_LATEST_CHECKPOINT": "0b6e7c5e-3a1f-4d2b-9c1e-2f8a4b6d9e01",
    "DETTUI_RENDEZVOUS": json.dumps({"addresses": ["10.0.0.5", "10.0.0.6"], "rank": 1,
                                     "slots": [2, 2], "port": 29500}),
}

READ_BACK = """
import json, sys
from determined import _info
d = sys.argv[1]
info = _info.ClusterInfo._from_file(d + "/cluster.json")
info._trial_info = _info.TrialInfo._from_file(d + "/trial.json")
info._rendezvous_info = _info.RendezvousInfo._from_file(d + "/rendezvous.json")
info._resources_info = _info.ResourcesInfo._from_file(d + "/resources.json")
print(json.dumps({
    "master_url": info.master_url, "slot_ids": info.slot_ids, "task_id": info.task_id,
    "allocation_id": info.allocation_id, "session_token": info.session_token,
    "latest_checkpoint": info.latest_checkpoint, "container_addrs": info.container_addrs,
    "container_rank": info.container_rank, "slot_counts": info.container_slot_counts,
    "trial_id": info.trial.trial_id, "hparams": info.trial.hparams,
    "steps": info.trial._steps_completed, "run_id": info.trial._trial_run_id,
    "debug": info.trial._debug, "user_data": info.user_data, "gpus": info.gpu_uuids}))
"""


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_the_real_package_reads_the_info_files(tmp_path: Path) -> None:
    runinfo.write(tmp_path, ENV, tmp_path / "work", mounted=True)
    out = subprocess.run([str(Path(DET_VENV or "") / "bin" / "python"), "-c", READ_BACK,
                          str(tmp_path / "info")], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert json.loads(out) == {
        "master_url": "http://10.0.0.1:8080", "slot_ids": [0, 1], "task_id": "3.abc",
        "allocation_id": "3.abc.2", "session_token": "tok",
        "latest_checkpoint": "0b6e7c5e-3a1f-4d2b-9c1e-2f8a4b6d9e01",
        "container_addrs": ["10.0.0.5", "10.0.0.6"], "container_rank": 1, "slot_counts": [2, 2],
        "trial_id": 7, "hparams": {"lr": 0.1}, "steps": 20, "run_id": 2, "debug": True,
        "user_data": {"x": 1}, "gpus": []}
    assert (tmp_path / "workdir").is_dir() and (tmp_path / "train" / "model").is_dir()
    assert oct((tmp_path / "info" / "cluster.json").stat().st_mode & 0o777) == "0o600"


def test_without_namespaces_the_run_dir_links_the_work_dir(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    runinfo.write(tmp_path / "run", {**ENV, "DETTUI_RENDEZVOUS": ""}, work, mounted=False)
    assert (tmp_path / "run" / "workdir").resolve() == work.resolve()
    rdv = json.loads((tmp_path / "run" / "info" / "rendezvous.json").read_text())
    assert rdv == {"container_addrs": ["127.0.0.1"], "container_rank": 0,
                   "container_slot_counts": [2]}
    assert runinfo.environment(tmp_path / "run", work, mounted=False) == {
        "DET_RUN_DIR": str(tmp_path / "run"), "DET_WORKDIR": str(work)}


def test_mounts_put_storage_where_the_real_package_looks(tmp_path: Path) -> None:
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": "/srv/ckpt"}}
    got = [(str(m.source), m.target) for m in runinfo.mounts(tmp_path / "r", tmp_path / "w",
                                                            config)]
    assert got == [(str(tmp_path / "r"), "/run/determined"),
                   (str(tmp_path / "w"), "/run/determined/workdir"),
                   (str(tmp_path / "w"), "/run/determined/train/model"),
                   ("/srv/ckpt", "/determined_shared_fs")]
    directory = {"checkpoint_storage": {"type": "directory", "container_path": "/x"}}
    assert [m.target for m in runinfo.mounts(tmp_path, tmp_path, directory)][-1] == \
        "/run/determined/train/model"
