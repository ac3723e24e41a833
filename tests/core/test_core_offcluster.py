"""The Core API off-cluster (Dummy twins) and its pure pieces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dettui import core
from dettui.core._checkpoint import list_resources
from dettui.storage import storage_base
from tests.conftest import SAMPLE


def test_sample_script_runs_anywhere(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    res = subprocess.run([sys.executable, "train.py"], cwd=SAMPLE, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "done after 200 steps" in res.stdout
    ckpts = list((tmp_path / "data" / "dettui" / "checkpoints").iterdir())
    assert ckpts
    steps = sorted(json.loads((c / "metadata.json").read_text())["steps_completed"]
                   for c in ckpts)
    assert steps == [100, 200]
    assert all((c / "state.pt").is_file() for c in ckpts)


def test_dummy_context_records_reports(tmp_path: Path) -> None:
    with core.init(checkpoint_storage=tmp_path) as ctx:
        assert ctx.info is None
        ctx.train.report_training_metrics(5, {"loss": 0.5})
        ctx.train.report_validation_metrics(5, {"acc": 0.9, "raw": b"dropped"})
        assert ctx.train.reports == [("training", 5, {"loss": 0.5}),
                                     ("validation", 5, {"acc": 0.9})]
        with pytest.raises(ValueError, match="invalid scalar value: None"):
            ctx.train.report_validation_metrics(6, {"acc": None})
        with pytest.raises(ValueError, match="between 0 and 1"):
            ctx.train.report_progress(1.5)
        assert ctx.preempt.should_preempt() is False
        with ctx.checkpoint.store_path({"steps_completed": 5}) as (path, uuid):
            (path / "w.txt").write_text("weights")
        assert json.loads((tmp_path / uuid / "metadata.json").read_text()) == {
            "steps_completed": 5}
        with ctx.checkpoint.restore_path(uuid) as restored:
            assert (restored / "w.txt").read_text() == "weights"
        with pytest.raises(ValueError, match="requires a 'steps_completed' item"), \
                ctx.checkpoint.store_path({"epoch": 1}):
            pass


def test_store_path_is_chief_only_unsharded(tmp_path: Path) -> None:
    dist = core.DistributedContext(rank=1, size=2)
    ckpt = core.CheckpointContext(tmp_path, dist)
    with pytest.raises(RuntimeError, match=r"non-chief worker \(rank=1\)"), \
            ckpt.store_path({"steps_completed": 1}):
        pass


def test_metadata_merge_and_conflicts() -> None:
    merged, conflicts = core.merge_metadata([
        {"steps_completed": 3, "opt": {"lr": 0.1}, "rank_0": "ok"},
        {"steps_completed": 3, "opt": {"momentum": 0.9}, "rank_1": "ok"},
    ])
    assert merged == {"steps_completed": 3, "opt": {"lr": 0.1, "momentum": 0.9},
                      "rank_0": "ok", "rank_1": "ok"}
    assert conflicts == {}
    _, conflicts = core.merge_metadata([{"x": [1]}, {"x": [2]}, {"x": [1]}])
    assert conflicts == {"/x": [0, 1]}


def test_resources_and_storage_layout(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"123")
    (tmp_path / "metadata.json").write_text("{}")
    assert list_resources(tmp_path) == {"d/": "0", "d/a.bin": "3", "metadata.json": "2"}
    assert storage_base({"checkpoint_storage": {"type": "shared_fs", "host_path": "/h",
                                                "storage_path": "s"}}) == Path("/h/s")
    assert storage_base({"checkpoint_storage": {"type": "directory",
                                                "container_path": "/c"}}) == Path("/c")


def test_determineds_other_core_names_off_cluster(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorboardMode is accepted; run metadata is kept locally; the profiler and
    `experimental` are there and do nothing off a cluster; single-node local operations."""
    monkeypatch.chdir(tmp_path)
    assert [m.value for m in core.TensorboardMode] == ["AUTO", "MANUAL"]
    with core.init(checkpoint_storage=tmp_path,
                   tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        assert ctx.train.get_metadata() is None
        assert ctx.train.set_metadata({"a": 1}) == {"a": 1}
        assert ctx.train.get_metadata() == {"a": 1}
        ctx.train.report_early_exit(core.EarlyExitReason.INVALID_HP)
        assert ctx.train.get_tensorboard_path() == tmp_path / "tensorboard"
        ctx.profiler.on(sampling_interval=2)
        ctx.profiler.off()
        ctx.experimental.report_task_using_checkpoint(type("C", (), {"uuid": "u"})())
        dist = ctx.distributed
        assert dist.get_num_agents() == 1 and dist.allgather_local(7) == [7]
        assert dist.gather_local(7) == [7] and dist.broadcast_local(7) == 7


def test_tensorboard_path_is_determineds_layout_under_the_storage() -> None:
    from dettui.core._train import tensorboard_path

    info = core.ClusterInfo(
        master_url="http://m", cluster_id="c-1", agent_id="a", slot_ids=[0], task_id="t",
        allocation_id="t.1", session_token="s", task_type="TRIAL", latest_checkpoint=None,
        trial=core.TrialInfo(trial_id=7, experiment_id=3, trial_seed=0, hparams={}, config={},
                             steps_completed=0, trial_run_id=1))
    assert tensorboard_path(Path("/store"), info) == Path(
        "/store/c-1/tensorboard/experiment/3/trial/7")
