"""Reported metrics as TensorBoard events, as Determined's harness writes them: what
TensorBoard's own EventAccumulator reads back (tags `Determined/<name>` and
`Determined/val_<name>`, batch metrics at their steps, non-scalars skipped); nothing and one
debug line where the trial's Python has no tensorboard; MANUAL mode leaves the directory to
the trial. (A trial's events in checkpoint storage: tests/core/test_distributed_own.py.)"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from dettui import core
from dettui.core._info import ClusterInfo, TrialInfo
from dettui.core._session import Session
from dettui.core._tensorboard import MetricWriter, masked_crc32c, metric_writer
from tests.core.test_distributed_own import scalars


def test_events_are_what_tensorboard_reads(tmp_path: Path) -> None:
    import numpy as np

    writer = MetricWriter(tmp_path / "tb")
    writer.write("training", 10, {"loss": 0.5, "acc": np.float32(0.25), "note": "text"},
                 [{"loss": 0.75}, {"loss": 0.5}])
    writer.write("validation", 10, {"loss": 0.4, "validation_acc": 1, "arr": [1, 2]}, None)
    writer.write("inference", 10, {"loss": 9.0}, None)  # Determined writes two groups only
    writer.flush()
    writer.write("training", 20, {"loss": 0.25, "acc": np.array(0.5)}, None)
    writer.close()
    assert scalars(tmp_path / "tb") == {
        "Determined/loss": [(8, 0.75), (9, 0.5), (20, 0.25)],
        "Determined/acc": [(10, 0.25), (20, 0.5)],
        "Determined/val_loss": [(10, pytest.approx(0.4))],
        "Determined/validation_acc": [(10, 1.0)],
    }
    (event_file,) = (tmp_path / "tb").iterdir()
    assert event_file.name.startswith("events.out.tfevents.")


def test_the_record_checksum_is_crc32c() -> None:
    # CRC-32C of "123456789" is 0xE3069283; TFRecord stores it rotated and offset
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_without_tensorboard_nothing_and_one_debug_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what find_spec sees as absent
    with caplog.at_level(logging.DEBUG, logger="dettui.core"):
        assert metric_writer(tmp_path / "tb") is None
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert "no tensorboard package" in caplog.records[0].getMessage()
    assert not (tmp_path / "tb").exists()


def train_context(tmp_path: Path, mode: core.TensorboardMode) -> core.TrainContext:
    info = ClusterInfo(
        master_url="http://127.0.0.1:9", cluster_id="c", agent_id="a", slot_ids=[],
        task_id="t", allocation_id="", session_token="", task_type="TRIAL",
        latest_checkpoint=None, user="u",
        trial=TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={},
                        steps_completed=0, trial_run_id=1))
    return core.TrainContext(Session(info.master_url, task_token=""), info, True,
                             tmp_path / "tb", mode)


def test_manual_mode_leaves_the_directory_to_the_trial(tmp_path: Path) -> None:
    auto = train_context(tmp_path, core.TensorboardMode.AUTO)
    with pytest.raises(RuntimeError, match="only be used in MANUAL mode"):
        auto.upload_tensorboard_files()
    auto.close()
    manual = train_context(tmp_path, core.TensorboardMode.MANUAL)
    assert manual._events is None and manual.get_tensorboard_path() == tmp_path / "tb"
    manual.upload_tensorboard_files(lambda p: True, lambda p, rank: p)
    manual.close()
    assert not (tmp_path / "tb").exists()
