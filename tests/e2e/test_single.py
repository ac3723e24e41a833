"""End to end: `dettui serve` and the `dettui` CLI as subprocesses, running sample_ctx/."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served, marked_processes

pytestmark = pytest.mark.slow


def test_sample_experiment_runs_end_to_end(served: Served) -> None:
    res = served.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE), "--follow",
                     timeout=300)
    assert "Created experiment 1" in res.stdout
    assert "Experiment 1 ended: COMPLETED" in res.stdout
    described = json.loads(served.cli("e", "describe", "1", "--json").stdout)
    assert described["experiment"]["state"] == "STATE_COMPLETED"
    trial = described["trials"][0]
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["totalBatchesProcessed"] >= 100
    assert "validation_loss" in trial["latestValidation"]["metrics"]["avgMetrics"]
    assert "loss" in trial["latestTraining"]["metrics"]["avgMetrics"]
    ckpts = described["checkpoints"]
    assert ckpts, "the sample checkpoints"
    latest = max(ckpts, key=lambda c: c["metadata"]["steps_completed"])
    ckpt_dir = served.state_dir / "checkpoints" / latest["uuid"]
    assert (ckpt_dir / "metadata.json").is_file()
    assert json.loads((ckpt_dir / "metadata.json").read_text())["steps_completed"] == (
        latest["metadata"]["steps_completed"])
    assert set(latest["resources"]) >= {"metadata.json"}
    # The same facts through the CLI's tables and the metrics API.
    table = served.cli("e", "describe", "1").stdout
    assert "COMPLETED" in table and latest["uuid"] in table
    logs = served.cli("t", "logs", "1").stdout
    assert "[rank=" not in logs or "||" in logs
    assert "validation_loss" in logs or "steps" in logs
    metrics = served.api("GET", "/api/v1/trials/1/metrics?group=validation")["metrics"]
    assert metrics and metrics[-1]["metrics"]["avgMetrics"]["validation_loss"] >= 0
    listed = served.cli("e", "list").stdout
    assert "COMPLETED" in listed
    # The best searcher metric is in the experiment lists (the dashboard's Best column).
    best = min(m["metrics"]["avgMetrics"]["validation_loss"] for m in metrics)
    exp = served.api("GET", "/api/v1/experiments")["experiments"][0]
    assert exp["bestTrialSearcherMetric"] == pytest.approx(best)
    # A one-slot trial's rank 0 is all of its lines; a rank it does not have is an error.
    assert served.cli("t", "logs", "1", "--rank", "0").stdout == logs
    wrong = served.cli("t", "logs", "1", "--rank", "1", check=False)
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "its only rank is 0" in wrong.stderr
    # Killing an experiment that has ended does nothing, and says so.
    killed = served.cli("e", "kill", "1")
    assert "already ended (COMPLETED): nothing to kill" in killed.stdout


def write_ctx(tmp_path: Path, config: str, files: dict[str, str]) -> tuple[Path, Path]:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for name, text in files.items():
        (ctx / name).write_text(textwrap.dedent(text))
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(textwrap.dedent(config))
    return cfg, ctx


def test_failing_trial_errors_after_max_restarts(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: fails
        entrypoint: python3 fail.py
        searcher: {name: single, metric: loss, max_length: 1}
        max_restarts: 1
        """, {"fail.py": "import os\nprint('attempt', os.environ['DET_TRIAL_RUN_ID'])\n"
                         "raise SystemExit(3)\n"})
    res = served.cli("e", "create", str(cfg), str(ctx), "--follow", check=False, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Experiment 1 ended: ERROR" in res.stdout
    trial = served.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["state"] == "STATE_ERROR"
    assert trial["restarts"] == 2
    assert len(trial["allocationIds"]) == 2
    logs = served.cli("t", "logs", "1").stdout
    assert "attempt 1" in logs and "attempt 2" in logs and "attempt 3" not in logs
    assert logs.count("the entrypoint exited with code 3") == 2, logs
    listed = served.cli("e", "list").stdout  # no 100 % for work that failed
    assert "ERROR" in listed and "100%" not in listed, listed


def test_kill_ends_the_whole_process_tree(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: sleeper
        entrypoint: sh spawn.sh
        searcher: {name: single, metric: loss, max_length: 1}
        """, {"spawn.sh": """
        setsid sleep 1000 &
        sleep 1000 &
        python3 -c 'import time; print("ready", flush=True); time.sleep(1000)'
        """})
    served.cli("e", "create", str(cfg), str(ctx))
    deadline = time.monotonic() + 60
    while "ready" not in served.cli("t", "logs", "1").stdout:
        assert time.monotonic() < deadline, "the trial never started"
        time.sleep(0.2)
    marked = _marked_processes()
    assert len(marked) >= 3, marked
    served.cli("e", "kill", "1")
    exp = served.wait_experiment(1, timeout=60)
    assert exp["state"] == "STATE_CANCELED"
    deadline = time.monotonic() + 15
    while _marked_processes():
        assert time.monotonic() < deadline, f"left behind: {_marked_processes()}"
        time.sleep(0.2)


_marked_processes = marked_processes


def test_master_restart_keeps_everything(served: Served) -> None:
    served.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE), "--follow", timeout=300)
    before = json.loads(served.cli("e", "describe", "1", "--json").stdout)
    logs_before = served.cli("t", "logs", "1").stdout
    metrics_before = served.api("GET", "/api/v1/trials/1/metrics")["metrics"]
    served.kill9()
    served.start()
    after = json.loads(served.cli("e", "describe", "1", "--json").stdout)
    assert after["experiment"]["state"] == before["experiment"]["state"] == "STATE_COMPLETED"
    assert after["trials"] == before["trials"]
    assert after["checkpoints"] == before["checkpoints"]
    assert served.cli("t", "logs", "1").stdout == logs_before
    assert served.api("GET", "/api/v1/trials/1/metrics")["metrics"] == metrics_before
