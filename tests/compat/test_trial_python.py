"""The trial's Python is the one the user chose (issue 32, item 3): a PATH in
`environment.environment_variables`, or a Python named by absolute path in the entrypoint,
reaches every process of the trial, launcher children included, so the real determined==0.38.1
launcher's `python3` workers import the real package; without either, the agent's Python runs
the trial and `determined` is dettui's stand-in. A Python that has neither says so in one line.

One master, every experiment submitted at once and waited on together."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV
from tests.conftest import Served
from tests.e2e.test_single import write_ctx

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

WORKER = """
import os, sys
import determined
print("rank", os.environ.get("RANK", "-"), "determined is", determined.__file__,
      "python is", sys.executable, flush=True)
"""
LAUNCH = "python3 -m determined.launch.torch_distributed python3 train.py"
STAND_IN = "dettui/launch/_determined.py"

# name -> (entrypoint, environment_variables, slots)
CASES = {
    "path": (LAUNCH, f"[PATH={DET_VENV}/bin:/usr/bin:/bin]", 2),
    "named": (f"{DET_VENV}/bin/{LAUNCH}", "[]", 2),
    "plain": (LAUNCH, "[]", 2),
    "bare": ("python3 train.py", "[PATH=/usr/bin:/bin]", 1),
    # Determined's legacy `module:Trial` runs the real harness on the PATH's python3
    # (determined 0.38.1 calls torch.load() bare: torch >= 2.6 needs the variable)
    "legacy": ("model_def:LinearTrial", f"[PATH={DET_VENV}/bin:/usr/bin:/bin, "
               "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1]", 1),
}
TRIAL_CTX = Path(__file__).resolve().parent / "trial_ctx"


@pytest.fixture
def eight_slots(tmp_path: Path) -> Iterator[Served]:
    """Slots for every case at once (2 + 2 + 2 + 1 + 1)."""
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "8"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _submit(served: Served, where: Path, name: str) -> int:
    entrypoint, variables, slots = CASES[name]
    where.mkdir()
    cfg, ctx = write_ctx(where, f"""
        name: python-{name}
        entrypoint: {entrypoint}
        resources: {{slots_per_trial: {slots}}}
        searcher: {{name: single, metric: val_loss, max_length: {{batches: 2}}}}
        max_restarts: 0
        hyperparameters: {{global_batch_size: 8, lr: 0.1, gate: {where}/gate}}
        environment: {{environment_variables: {variables}}}
        """, {"train.py": WORKER})
    shutil.copy(TRIAL_CTX / "model_def.py", ctx)
    out = served.cli("e", "create", str(cfg), str(ctx)).stdout
    return int(out.split("Created experiment ")[1].split()[0])


def _trial_logs(served: Served, exp_id: int) -> str:
    trial = served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]["id"]
    return served.cli("t", "logs", str(trial)).stdout


def _workers(logs: str) -> list[str]:
    """What each worker said it imported: `RANK determined-path python-path`."""
    return sorted(" ".join(line.split("rank ", 1)[1].split()[i] for i in (0, 3, 6))
                  for line in logs.splitlines() if "determined is" in line)


# The real harness asks for the experiment's best validation before there is one: Determined's
# master answers that with 404 as well, which the package reads as "none yet".
@pytest.mark.expect_404(r"GET /api/v1/experiments/\d+/searcher/best_searcher_validation_metric")
def test_every_worker_runs_the_python_the_experiment_names(eight_slots: Served,
                                                           tmp_path: Path) -> None:
    served = eight_slots
    ids = {name: _submit(served, tmp_path / name, name) for name in CASES}
    ended = {name: served.wait_experiment(i, timeout=180)["state"] for name, i in ids.items()}
    logs = {name: _trial_logs(served, i) for name, i in ids.items()}
    real = f"{DET_VENV}/lib/python3.11/site-packages/determined/__init__.py"
    for name in ("path", "named"):  # the real package's launcher, pid_server and workers
        assert ended[name] == "STATE_COMPLETED", logs[name]
        assert _workers(logs[name]) == [f"{r} {real} {DET_VENV}/bin/python3" for r in "01"], \
            logs[name]
        assert "determined.exec.pid_server" not in logs[name], logs[name]
    assert ended["legacy"] == "STATE_COMPLETED", logs["legacy"]
    assert f"determined is {real}" in logs["legacy"], logs["legacy"]
    # no PATH, no Python named: the agent's Python, and dettui's launcher and stand-in
    assert ended["plain"] == "STATE_COMPLETED", logs["plain"]
    workers = _workers(logs["plain"])
    assert len(workers) == 2 and all(STAND_IN in w.split()[1] for w in workers), logs["plain"]
    # a Python with neither the real package nor dettui: one line that names the fix
    assert ended["bare"] == "STATE_ERROR", logs["bare"]
    said = [line for line in logs["bare"].splitlines() if "No module named 'determined'" in line]
    assert said and "pip install determined" in said[-1], logs["bare"]
