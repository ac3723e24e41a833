"""Experiment progress as Determined's master computes it (issue 31, item 6), through `dettui
serve`: the searcher's progress is saved when a trial reports its own, it is 1 once the
experiment COMPLETED (every searcher: single, random, grid, adaptive_asha), an ERROR or
CANCELED experiment keeps what it had reached (it was shown 100 %: its failed trials counted
as done), and a continued experiment starts again from 0 (it was shown 100 % while running)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_search import created
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = pytest.mark.slow

# Reports progress `part` of the way and validates at each step; then fails when `fail` is
# set, or on its first run only with `fail_once` (a continued run starts from the checkpoint
# the first left); then waits up to `hold` seconds, or until it is preempted.
TRAIN = """
import sys, time
from dettui import core

with core.init() as ctx:
    hp = ctx.info.trial.hparams
    steps = int(hp.get("steps", 4))
    for step in range(1, steps + 1):
        ctx.train.report_validation_metrics(steps_completed=step,
                                            metrics={"loss": float(hp.get("x", 1)) + 1 / step,
                                                     "batches": step})
        ctx.train.report_progress(step / steps * float(hp.get("part", 1)))
    if hp.get("fail_once") and ctx.info.latest_checkpoint is None:
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "w").write_text("1")
        sys.exit(3)
    if hp.get("fail"):
        sys.exit(3)
    deadline = time.time() + float(hp.get("hold", 0))
    while time.time() < deadline and not ctx.preempt.should_preempt():
        time.sleep(0.05)
"""


def run(served: Served, tmp_path: Path, name: str, searcher: str,
        hparams: str = "{}") -> int:
    folder = tmp_path / name
    folder.mkdir()
    cfg, ctx = write_ctx(folder, f"""
        name: {name}
        entrypoint: python3 train.py
        searcher: {searcher}
        hyperparameters: {hparams}
        max_restarts: 0
        """, {"train.py": TRAIN})
    return created(served.cli("e", "create", str(cfg), str(ctx)).stdout)


def progress_of(served: Served, exp_id: int) -> float | None:
    return served.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"]["progress"]


@pytest.mark.parametrize("searcher, hparams", [
    ("{name: single, metric: loss}", "{steps: 2}"),
    ("{name: random, metric: loss, max_trials: 3, max_concurrent_trials: 2}",
     "{steps: 2, x: {type: double, minval: 0, maxval: 1}}"),
    ("{name: grid, metric: loss, max_concurrent_trials: 2}",
     "{steps: 2, x: {type: categorical, vals: [0, 1, 2]}}"),
    # trials that end before the first rung (2 of 25 batches): no rung ranks them, and the
    # search showed 0 % once COMPLETED
    ("{name: adaptive_asha, metric: loss, time_metric: batches, max_time: 100, max_trials: 4, "
     "divisor: 4, max_concurrent_trials: 2}",
     "{steps: 2, x: {type: double, minval: 0, maxval: 1}}"),
], ids=["single", "random", "grid", "adaptive_asha"])
def test_a_completed_search_is_at_100_percent(served: Served, tmp_path: Path, searcher: str,
                                              hparams: str) -> None:
    exp_id = run(served, tmp_path, "done", searcher, hparams)
    exp = served.wait_experiment(exp_id, timeout=300)
    assert exp["state"] == "STATE_COMPLETED"
    assert exp["progress"] == pytest.approx(1.0)
    listed = served.cli("e", "list").stdout
    assert "100%" in next(line for line in listed.splitlines() if f" {exp_id} " in line)


def test_an_error_experiment_keeps_the_progress_it_had(served: Served, tmp_path: Path) -> None:
    exp_id = run(served, tmp_path, "fails",
                 "{name: random, metric: loss, max_trials: 2, max_concurrent_trials: 1}",
                 "{steps: 2, part: 0.5, fail: true, x: {type: double, minval: 0, maxval: 1}}")
    exp = served.wait_experiment(exp_id, timeout=300)
    assert exp["state"] == "STATE_ERROR"
    assert exp["progress"] is not None and exp["progress"] < 1.0, exp["progress"]
    described = served.cli("e", "describe", str(exp_id)).stdout
    assert "100%" not in described, described


def test_a_canceled_experiment_keeps_the_progress_it_had(served: Served,
                                                         tmp_path: Path) -> None:
    exp_id = run(served, tmp_path, "canceled", "{name: single, metric: loss}",
                 "{steps: 2, part: 0.5, hold: 600}")
    until(lambda: progress_of(served, exp_id), "the trial to report its progress",
          done=lambda p: p == pytest.approx(0.5), timeout=120)
    served.cli("e", "cancel", str(exp_id))
    exp = served.wait_experiment(exp_id, timeout=120)
    assert exp["state"] == "STATE_CANCELED"
    assert exp["progress"] == pytest.approx(0.5)


def test_a_continued_experiment_starts_again_from_zero(served: Served, tmp_path: Path) -> None:
    exp_id = run(served, tmp_path, "continued", "{name: single, metric: loss}",
                 "{steps: 2, part: 0.5, fail_once: true, hold: 600}")
    exp = served.wait_experiment(exp_id, timeout=120)
    assert exp["state"] == "STATE_ERROR" and exp["progress"] == pytest.approx(0.5)
    served.api("POST", "/api/v1/experiments/continue", {"id": exp_id})  # `det e continue`
    # it runs again from its checkpoint, reports half way and waits: the experiment is half
    # way (it showed 100 %: its trial had ended once), not done
    until(lambda: served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0],
          "the continued trial to run", done=lambda t: t["state"] == "STATE_RUNNING",
          timeout=120)
    until(lambda: progress_of(served, exp_id), "the experiment's progress half way",
          done=lambda p: p == pytest.approx(0.5), timeout=60)
    assert progress_of(served, exp_id) == pytest.approx(0.5)
    served.cli("e", "cancel", str(exp_id))
    exp = served.wait_experiment(exp_id, timeout=120)
    assert exp["state"] == "STATE_CANCELED" and exp["progress"] == pytest.approx(0.5)
