"""Searches end to end through `dettui serve`: a random search of 20 tiny trials, an ASHA search
whose stopped trials really stop, and a master killed with SIGKILL mid-search."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served
from tests.e2e.test_single import _marked_processes, write_ctx

pytestmark = pytest.mark.slow

TINY = """
import os, time
from dettui import core

with core.init() as ctx:
    hp = ctx.info.trial.hparams
    time.sleep(float(hp.get("sleep", 0)))
    ctx.train.report_validation_metrics(steps_completed=1, metrics={"loss": hp["x"] ** 2})
"""


def random_search(tmp_path: Path, trials: int, sleep: float) -> tuple[Path, Path]:
    return write_ctx(tmp_path, f"""
        name: tiny-random
        entrypoint: python3 tiny.py
        searcher: {{name: random, metric: loss, max_trials: {trials}, max_concurrent_trials: 2}}
        hyperparameters:
          x: {{type: double, minval: -1, maxval: 1}}
          sleep: {sleep}
        max_restarts: 0
        """, {"tiny.py": TINY})


def trials_of(s: Served, exp_id: int) -> list[dict]:
    return s.api("GET", f"/api/v1/experiments/{exp_id}/trials?limit=1000")["trials"]


def created(out: str) -> int:
    return int(out.split("Created experiment ")[1].split()[0])


def test_random_search_runs_every_trial_once(served: Served, tmp_path: Path) -> None:
    cfg, ctx = random_search(tmp_path, 20, 0)
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(exp_id, timeout=300)
    trials = trials_of(served, exp_id)
    assert exp["state"] == "STATE_COMPLETED" and exp["progress"] == pytest.approx(1.0)
    assert len(trials) == 20 and {t["state"] for t in trials} == {"STATE_COMPLETED"}
    xs = {t["hparams"]["x"] for t in trials}
    assert len(xs) == 20 and all(-1 <= x <= 1 for x in xs)
    best = min(t["bestValidation"]["metrics"]["avgMetrics"]["loss"] for t in trials)
    assert best == pytest.approx(min(x * x for x in xs))
    described = served.cli("e", "describe", str(exp_id)).stdout
    table = described.split("Trials (best first)")[1].split("Checkpoints")[0]
    shown = [float(line.split("│")[3]) for line in table.splitlines()
             if line.startswith("│") and "COMPLETED" in line]
    assert len(shown) == 20 and shown == sorted(shown) and shown[0] == pytest.approx(best, rel=1e-5)


def test_asha_stops_the_worse_trials_early(served: Served) -> None:
    exp_id = created(served.cli("e", "create", str(SAMPLE / "search.yaml"), str(SAMPLE),
                                "--config", "searcher.max_trials=8").stdout)
    exp = served.wait_experiment(exp_id, timeout=400)
    trials = trials_of(served, exp_id)
    assert exp["state"] == "STATE_COMPLETED", served.cli("e", "describe", str(exp_id)).stdout
    assert len(trials) == 8 and {t["state"] for t in trials} == {"STATE_COMPLETED"}
    batches = sorted(t["totalBatchesProcessed"] for t in trials)
    assert batches[0] < 400, f"some trial stopped early: {batches}"
    assert batches[-1] == 400, "the best trial ran to max_time"
    stopped = [t for t in trials if t["totalBatchesProcessed"] < 400]
    logs = served.cli("t", "logs", str(stopped[0]["id"])).stdout
    assert "told to stop at step" in logs, "told through the preemption long-poll, it checkpointed"
    # why, from the master: not a preemption
    at = re.search(r"stopped by the searcher at step (\d+) \(ASHA: not promoted to the next "
                   r"rung\)", logs)
    assert at and int(at[1]) == stopped[0]["totalBatchesProcessed"], logs
    assert logs.count("— attempt 1 of trial") == 1, logs
    # a trial that trained to max_time was not stopped: its log does not say it was
    full = served.cli("t", "logs", str(max(trials, key=lambda t: t["totalBatchesProcessed"])
                                       ["id"])).stdout
    assert "stopped by the searcher" not in full, full
    assert _marked_processes() == []


def test_master_sigkill_mid_search_loses_and_duplicates_nothing(served: Served,
                                                                 tmp_path: Path) -> None:
    cfg, ctx = random_search(tmp_path, 10, 0.5)
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    deadline = time.monotonic() + 120
    while sum(t["state"] == "STATE_COMPLETED" for t in trials_of(served, exp_id)) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    before = served.log_path
    served.kill9()
    served.start()
    try:
        exp = served.wait_experiment(exp_id, timeout=150)
    except AssertionError as e:
        states = [(t["id"], t["state"]) for t in trials_of(served, exp_id)]
        old = before.read_text()[-4000:] if before else ""
        raise AssertionError(f"trials: {states}\n{served.cli('task', 'list').stdout}\n"
                             f"log before the kill:\n{old}") from e
    trials = trials_of(served, exp_id)
    assert exp["state"] == "STATE_COMPLETED"
    assert len(trials) == 10, [t["id"] for t in trials]
    assert len({t["hparams"]["x"] for t in trials}) == 10
    assert {t["state"] for t in trials} == {"STATE_COMPLETED"}
