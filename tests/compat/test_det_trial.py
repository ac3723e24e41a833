"""A PyTorchTrial written against Determined's API (`from determined import pytorch`, a
one-argument evaluate_batch, a callback with state, a MetricReducer) trains, validates,
checkpoints, is paused and resumes: through dettui's harness where the trial's Python has no
real package, and through the real determined==0.38.1 harness where it has."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import Served
from tests.poll import until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]
CTX = Path(__file__).resolve().parent / "trial_ctx"


# The real harness asks for the experiment's best validation before there is one: Determined's
# master answers that with 404 as well, which the package reads as "none yet".
@pytest.mark.expect_404(r"GET /api/v1/experiments/\d+/searcher/best_searcher_validation_metric")
@pytest.mark.parametrize("harness", ["dettui", "real"])
def test_a_determined_pytorch_trial_trains_and_resumes(served: Served, tmp_path: Path,
                                                       harness: str) -> None:
    # in the checkpoint storage: the one place of the test's host that the trial (an
    # unprivileged user, in its own mount namespace) and the test both see
    gate = served.state_dir / "checkpoints" / f"gate-{harness}"
    entrypoint = ("model_def:LinearTrial" if harness == "dettui" else
                  f"export PATH={DET_VENV}/bin:$PATH; "
                  "python3 -m determined.launch.torch_distributed --trial model_def:LinearTrial")
    (tmp_path / "exp.yaml").write_text(f"""
name: trial-{harness}
entrypoint: {entrypoint}
hyperparameters: {{global_batch_size: 8, lr: 0.1, gate: {gate}}}
searcher: {{name: single, metric: val_loss, max_length: {{batches: 24}}}}
min_validation_period: {{batches: 4}}
min_checkpoint_period: {{batches: 8}}
max_restarts: 0
environment:
  # determined 0.38.1 calls torch.load() bare; torch >= 2.6 loads weights only by default
  # and refuses the numpy RNG state in its checkpoints (a Determined/torch mismatch)
  environment_variables: [TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1]
""")
    ctx = tmp_path / "ctx"
    shutil.copytree(CTX, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    assert det(served, home, "user", "login", "determined", stdin="\n").returncode == 0
    created = det(served, home, "e", "create", str(tmp_path / "exp.yaml"), str(ctx))
    assert created.returncode == 0, created.stdout + created.stderr
    until(lambda: "waiting at batch 10" in served.cli(
        "t", "logs", "1").stdout, "the trial at batch 10", timeout=120)
    assert det(served, home, "e", "pause", "1").returncode == 0
    time.sleep(1)  # the preemption signal reaches the trial, then it may go on
    gate.touch()
    until(lambda: served.api("GET", "/api/v1/experiments/1/trials")[
        "trials"][0]["state"] == "STATE_PAUSED", "the pause", timeout=120)
    assert det(served, home, "e", "activate", "1").returncode == 0
    exp = served.wait_experiment(1, timeout=240)
    logs = served.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs
    where = f"{DET_VENV}/lib" if harness == "real" else "dettui/launch/_determined.py"
    assert any(where in line for line in logs.splitlines() if "determined is" in line), logs
    # the callback's state came back from the pause (the real harness also validates then)
    restored = re.findall(r"callback restored (\d+)", logs)
    assert len(restored) == 1 and int(restored[0]) >= 2, logs
    assert logs.count("waiting at batch 10") == 1, logs
    trial = served.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["totalBatchesProcessed"] == 24 and trial["restarts"] == 0, trial
    vals = served.api("GET", "/api/v1/trials/1/metrics?group=validation")["metrics"]
    last = vals[-1]["metrics"]["avgMetrics"]
    assert vals[-1]["stepsCompleted"] == 24 and last["val_loss"] < 1.0, vals[-1]
    assert 0 < last["max_abs_err"] < 3, last  # the MetricReducer's validation metric
    train = served.api("GET", "/api/v1/trials/1/metrics?group=training")["metrics"]
    assert "max_abs_err" not in train[-1]["metrics"]["avgMetrics"]  # for_training=False
    ckpts = served.api("GET", "/api/v1/experiments/1/checkpoints")["checkpoints"]
    assert max(c["metadata"]["steps_completed"] for c in ckpts) == 24
