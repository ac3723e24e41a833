"""One checkpoint per step (issue 31, smaller list): the samples saved the same step twice, a
preemption that came at a checkpoint step (the periodic save, then the preemption's) and a
detached run resumed at its end (the resumed checkpoint's step, saved again), and the
checkpoint lists showed two rows of one step. And `t describe --json` names the trial's best
checkpoint, as Determined's: the best of the checkpoints that have a validation at their step
(it was null when the best validation's step had no checkpoint)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served
from tests.e2e.test_detached import describe, headless, sample  # noqa: F401 (a fixture)
from tests.e2e.test_search import created
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = pytest.mark.slow


def steps_of(served: Served, exp_id: int) -> list[int]:
    ckpts = served.api("GET", f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    return [c["metadata"]["steps_completed"] for c in ckpts]


def test_a_detached_run_resumed_at_its_end_saves_no_second_checkpoint(
        headless: Served, tmp_path: Path) -> None:  # noqa: F811
    sample(headless, tmp_path / "ckpts", "--steps", "20", "--external-id", "run-1")
    again = sample(headless, tmp_path / "ckpts", "--steps", "20", "--external-id", "run-1")
    assert "resumed from checkpoint" in again.stdout and "at step 20" in again.stdout
    assert steps_of(headless, 1) == [20]


def test_a_preemption_at_a_checkpoint_step_saves_it_once(served: Served,
                                                         tmp_path: Path) -> None:
    cfg = tmp_path / "every-step.yaml"
    cfg.write_text((SAMPLE / "single.yaml").read_text().replace(
        "max_batches: 200", "max_batches: 400\n  step_sleep: 0.05").replace(
        "batches: 100", "batches: 1"))  # a checkpoint every step: a preemption lands on one
    exp_id = created(served.cli("e", "create", str(cfg), str(SAMPLE)).stdout)
    until(lambda: steps_of(served, exp_id), "a few checkpoints",
          done=lambda s: len(s) >= 3, timeout=120)
    served.cli("e", "pause", str(exp_id))
    until(lambda: served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0],
          "the trial to stop", done=lambda t: t["state"] == "STATE_PAUSED", timeout=120)
    logs = served.cli("t", "logs", str(min(
        served.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"]["trialIds"]))).stdout
    assert "told to stop at step" in logs
    twice = [s for s, n in Counter(steps_of(served, exp_id)).items() if n > 1]
    assert twice == [], f"steps saved twice: {twice}"
    served.cli("e", "kill", str(exp_id))


BEST = """
from dettui import core

with core.init() as ctx:
    for step, loss, save in ((1, 0.3, True), (2, 0.2, False), (3, 0.25, True)):
        ctx.train.report_validation_metrics(steps_completed=step, metrics={"loss": loss})
        if save:
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "w").write_text(str(step))
"""


def test_the_best_checkpoint_is_the_best_validated_one(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: best-checkpoint
        entrypoint: python3 train.py
        searcher: {name: single, metric: loss}
        max_restarts: 0
        """, {"train.py": BEST})
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(exp_id)
    assert exp["state"] == "STATE_COMPLETED"
    trial = json.loads(served.cli("t", "describe", str(exp["trialIds"][0]), "--json").stdout)
    assert trial["bestValidation"]["totalBatches"] == 2  # no checkpoint at step 2
    best = trial["bestCheckpoint"]
    assert best is not None and best["totalBatches"] == 3 and best["state"] == "STATE_COMPLETED"
