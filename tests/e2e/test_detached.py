"""Detached mode end to end: `dettui serve` without agents, and scripts run with plain `python`
(or torchrun) that create unmanaged experiments and report to them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served

pytestmark = pytest.mark.slow


@pytest.fixture
def headless(tmp_path: Path) -> Iterator[Served]:
    """A master alone: nothing a detached script does may need an agent."""
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--no-agent"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def run(served: Served, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=served.env(), timeout=timeout, cwd=served.state_dir.parent)


def sample(served: Served, ckpts: Path, *args: str) -> subprocess.CompletedProcess[str]:
    res = run(served, str(SAMPLE / "detached.py"), "--checkpoint-dir", str(ckpts), *args)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    return res


def describe(served: Served, exp_id: int) -> dict:
    return dict(json.loads(served.cli("e", "describe", str(exp_id), "--json").stdout))


def test_sample_reports_like_any_experiment(headless: Served, tmp_path: Path) -> None:
    res = sample(headless, tmp_path / "ckpts", "--steps", "60")
    assert "experiment 1 trial 1: done after 60 steps" in res.stdout

    listed = headless.cli("e", "list").stdout
    row = next(line for line in listed.splitlines() if "spirals-detached" in line)
    assert "COMPLETED" in row
    described = describe(headless, 1)
    exp = described["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["unmanaged"] is True and exp["endTime"]
    trial = described["trials"][0]
    assert trial["state"] == "STATE_COMPLETED" and trial["totalBatchesProcessed"] == 60
    assert trial["hparams"] == {"learning_rate": 0.03, "hidden": 64}

    validation = headless.api("GET", "/api/v1/trials/1/metrics?group=validation")["metrics"]
    assert [m["stepsCompleted"] for m in validation] == [50, 60]
    assert 0 < validation[-1]["metrics"]["avgMetrics"]["validation_loss"] < 5
    training = headless.api("GET", "/api/v1/trials/1/metrics?group=training")["metrics"]
    assert [m["stepsCompleted"] for m in training] == [10, 20, 30, 40, 50, 60]

    (ckpt,) = described["checkpoints"]
    assert ckpt["metadata"] == {"steps_completed": 60, "rank_0": "ok"}
    assert ckpt["allocationId"] is None and ckpt["taskId"] == trial["taskId"]
    assert set(ckpt["resources"]) == {"metadata.json", "state_rank0.pt"}
    assert (tmp_path / "ckpts" / ckpt["uuid"] / "state_rank0.pt").is_file()
    assert ckpt["uuid"] in headless.cli("e", "describe", "1").stdout

    logs = headless.cli("t", "logs", "1").stdout
    assert "step 50: validation_loss=" in logs and "done after 60 steps" in logs
    assert headless.api("GET", "/api/v1/job-queues-v2")["jobs"] == []
    assert headless.api("GET", "/api/v1/agents")["agents"] == []


def test_a_failing_script_ends_in_error(headless: Served, tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent(f"""
        from dettui import core

        with core.init(detached={{"name": "fails", "checkpoint_storage": "{tmp_path}/c"}}) as ctx:
            ctx.train.report_training_metrics(steps_completed=3, metrics={{"loss": 1.0}})
            print("about to fail", flush=True)
            raise RuntimeError("boom")
    """))
    res = run(headless, str(script))
    assert res.returncode == 1 and "RuntimeError: boom" in res.stderr
    exp = describe(headless, 1)
    assert exp["experiment"]["state"] == "STATE_ERROR"
    trial = exp["trials"][0]
    assert trial["state"] == "STATE_ERROR" and trial["endTime"]
    assert trial["totalBatchesProcessed"] == 3
    logs = headless.cli("t", "logs", str(trial["id"])).stdout
    assert logs.index("about to fail") < logs.index("RuntimeError: boom")


def test_resuming_by_external_id_continues_the_same_trial(
    headless: Served, tmp_path: Path
) -> None:
    first = sample(headless, tmp_path / "ckpts", "--steps", "20", "--external-id", "run-1")
    assert "resumed" not in first.stdout
    ckpt = describe(headless, 1)["checkpoints"][0]["uuid"]
    second = sample(headless, tmp_path / "ckpts", "--steps", "40", "--external-id", "run-1")
    assert f"resumed from checkpoint {ckpt} at step 20" in second.stdout
    assert "experiment 1 trial 1: done after 40 steps" in second.stdout

    exps = headless.api("GET", "/api/v1/experiments")["experiments"]
    assert [(e["id"], e["externalExperimentId"]) for e in exps] == [(1, "run-1")]
    described = describe(headless, 1)
    (trial,) = described["trials"]
    assert trial["runId"] == 2 and trial["totalBatchesProcessed"] == 40
    assert described["experiment"]["state"] == "STATE_COMPLETED"
    training = headless.api("GET", "/api/v1/trials/1/metrics?group=training")["metrics"]
    assert [(m["trialRunId"], m["stepsCompleted"]) for m in training] == [
        (1, 10), (1, 20), (2, 30), (2, 40)]
    assert max(c["metadata"]["steps_completed"] for c in described["checkpoints"]) == 40


def test_two_ranks_share_one_detached_trial(headless: Served, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    res = run(headless, "-m", "torch.distributed.run", "--nproc_per_node", "2",
              "--master_addr", "127.0.0.1", "--master_port", str(port),
              str(SAMPLE / "detached.py"),
              "--checkpoint-dir", str(tmp_path / "ckpts"), "--steps", "30")
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    exps = headless.api("GET", "/api/v1/experiments")["experiments"]
    assert [e["numTrials"] for e in exps] == [1]
    described = describe(headless, 1)
    assert described["experiment"]["state"] == "STATE_COMPLETED"
    (ckpt,) = described["checkpoints"]
    assert ckpt["metadata"] == {"steps_completed": 30, "rank_0": "ok", "rank_1": "ok"}
    assert set(ckpt["resources"]) == {"metadata.json", "state_rank0.pt", "state_rank1.pt"}
    logs = headless.cli("t", "logs", "1", "--rank", "1").stdout
    assert "[rank=1]" in logs and "step 30: validation_loss=" in logs
