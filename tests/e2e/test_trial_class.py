"""Trial classes end to end: `model_def:SpiralsTrial` run by the harness on one slot and as
DDP on two, with validation and checkpoint periods, batch-size split, pause and resume."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLE, Served
from tests.e2e.test_queue import trial_of
from tests.e2e.test_single import _marked_processes
from tests.poll import until

pytestmark = pytest.mark.slow


def create(s: Served, *overrides: str) -> int:
    args = ["e", "create", str(SAMPLE / "trial.yaml"), str(SAMPLE)]
    for o in overrides:
        args += ["--config", o]
    out = s.cli(*args).stdout
    return int(out.split("Created experiment ")[1].split()[0])


def steps(s: Served, trial: int, group: str) -> list[int]:
    return [m["stepsCompleted"] for m in s.api(
        "GET", f"/api/v1/trials/{trial}/metrics?group={group}")["metrics"]]


def test_a_trial_class_validates_and_checkpoints_on_its_periods(served: Served) -> None:
    # the seed decides how fast it learns; checkpoint_policy none: only the periods checkpoint
    # (Determined's default 'best' also checkpoints each validation better than the last)
    e = create(served, "reproducibility.experiment_seed=7", "checkpoint_policy=none")
    exp = served.wait_experiment(e, timeout=120)
    logs = served.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs
    assert "rank 0 of 1: per-slot batch size 64" in logs
    assert steps(served, 1, "validation") == [50, 100, 150, 200]
    assert steps(served, 1, "training") == list(range(10, 201, 10))  # scheduling_unit 10
    ckpts = served.api("GET", f"/api/v1/experiments/{e}/checkpoints")["checkpoints"]
    assert sorted(c["metadata"]["steps_completed"] for c in ckpts) == [100, 200]
    latest = max(ckpts, key=lambda c: c["metadata"]["steps_completed"])
    assert {"state_dict.pth", "load_data.json", "metadata.json"} <= set(latest["resources"])
    best = served.api("GET", "/api/v1/trials/1")["trial"]["bestValidation"]
    first = served.api("GET", "/api/v1/trials/1/metrics?group=validation")["metrics"][0]
    assert best["metrics"]["avgMetrics"]["validation_loss"] < min(
        0.69, first["metrics"]["avgMetrics"]["validation_loss"]), "it learned"


def test_ddp_splits_the_global_batch_and_drops_the_remainder(served: Served) -> None:
    e = create(served, "resources.slots_per_trial=2", "hyperparameters.global_batch_size=65")
    exp = served.wait_experiment(e, timeout=180)
    logs = served.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs
    assert "[rank=0] || rank 0 of 2: per-slot batch size 32" in logs
    assert "[rank=1] || rank 1 of 2: per-slot batch size 32" in logs
    assert steps(served, 1, "validation") == [50, 100, 150, 200]
    assert _marked_processes() == []


def test_pause_checkpoints_and_activate_resumes_at_the_same_batch(served: Served) -> None:
    e = create(served, "hyperparameters.step_sleep=0.03")
    until(lambda: trial_of(served, e)["totalBatchesProcessed"] >= 20, "training", timeout=60)
    served.cli("e", "pause", str(e))
    until(lambda: trial_of(served, e)["state"] == "STATE_PAUSED", "paused", timeout=60)
    logs = served.cli("t", "logs", "1").stdout
    assert "stopped at batch" in logs
    paused_at = int(logs.split("stopped at batch ")[1].split(":")[0])
    ckpts = served.api("GET", f"/api/v1/experiments/{e}/checkpoints")["checkpoints"]
    assert paused_at in {c["metadata"]["steps_completed"] for c in ckpts}
    served.cli("e", "activate", str(e))
    assert served.wait_experiment(e, timeout=120)["state"] == "STATE_COMPLETED"
    logs = served.cli("t", "logs", "1").stdout
    assert f"at batch {paused_at}" in logs.split("resumed from checkpoint")[1].splitlines()[0]
    training = steps(served, 1, "training")
    assert training == sorted(set(training)) and training[-1] == 200, "no batch twice"
