"""`dettui serve --db postgresql://...`: the sample runs to COMPLETED with its store in a real
PostgreSQL (tests/pg_cluster.py); a second master on the same database is refused; a master
killed with SIGKILL mid-run and started again on the same database has lost nothing it had
acknowledged (metrics, checkpoints, state, a change it had just answered), and the trial
completes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dettui.master.store import pg
from tests.conftest import SAMPLE, Served
from tests.e2e.test_agent import start_agent
from tests.e2e.test_one_master import dettui, one_line
from tests.e2e.test_single import write_ctx

pytestmark = pytest.mark.slow

# About 6 s: reports every step, checkpoints every 10, resumes from its latest checkpoint.
TRIAL = """
import time
from dettui import core
with core.init() as ctx:
    step = 0
    if ctx.info.latest_checkpoint:
        with ctx.checkpoint.restore_path(ctx.info.latest_checkpoint) as path:
            step = int((path / "step").read_text())
    while step < 60:
        time.sleep(0.1)
        step += 1
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        if step % 10 == 0:
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                (path / "step").write_text(str(step))
    ctx.train.report_validation_metrics(steps_completed=step, metrics={"loss": 1 / step})
"""
CONFIG = """
name: pg-kill
entrypoint: python3 trial.py
searcher: {name: single, metric: loss, max_length: 60}
max_restarts: 2
"""


def stored(url: str, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """Rows read straight from the PostgreSQL store."""
    conn = pg.Connection(url)
    try:
        return [tuple(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def test_the_sample_completes_with_its_store_in_postgresql(pg_url: str, tmp_path: Path) -> None:
    served = Served(tmp_path / "state", tmp_path / "config",
                    extra=["--agent-slots", "1", "--db", pg_url])
    served.start()
    try:
        res = served.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE), "--follow",
                         timeout=300)
        assert "Experiment 1 ended: COMPLETED" in res.stdout, res.stdout + res.stderr
        trial = json.loads(served.cli("e", "describe", "1", "--json").stdout)["trials"][0]
        assert trial["state"] == "STATE_COMPLETED" and trial["totalBatchesProcessed"] >= 100
        assert not (served.state_dir / "master.db").exists(), "the store is not SQLite's"
        assert stored(pg_url, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = "
                      "current_database() AND pid != pg_backend_pid()") == [(1,)]  # master's
        assert stored(pg_url, "SELECT state FROM experiments") == [("STATE_COMPLETED",)]
        steps = stored(pg_url, "SELECT steps_completed FROM metrics WHERE grp='validation'")
        assert steps and max(s for (s,) in steps) == 200
        second = subprocess.run(
            [sys.executable, "-m", "dettui.cli", "serve", "--db", pg_url, "--no-agent",
             "--port", "0", "--state-dir", str(tmp_path / "other")],
            capture_output=True, text=True, timeout=60, env=served.env())
        assert second.returncode == 1, second.stdout + second.stderr
        assert "another dettui master already uses the database" in second.stderr
        assert second.stderr.count("\n") == 1, second.stderr
    finally:
        served.stop()


def test_a_database_it_cannot_reach_is_one_line_without_the_password(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    err = one_line(dettui("serve", "--db", f"postgresql://u:s3cret@127.0.0.1:{port}/x",
                          "--no-agent", "--port", "0", "--state-dir", str(tmp_path / "s")))
    assert f"cannot connect to the database postgresql://u:***@127.0.0.1:{port}/x" in err, err
    assert "s3cret" not in err


def _acknowledged(s: Served) -> dict[str, Any]:
    """What the master has answered about experiment 1: its trial's reports and checkpoints,
    the states."""
    metrics = s.api("GET", "/api/v1/trials/1/metrics?group=training")["metrics"]
    return {
        "metrics": {m["stepsCompleted"]: m["metrics"]["avgMetrics"]["loss"] for m in metrics},
        "checkpoints": {c["uuid"]: c["metadata"]["steps_completed"] for c in s.api(
            "GET", "/api/v1/experiments/1/checkpoints")["checkpoints"]},
        "experiment": s.api("GET", "/api/v1/experiments/1")["experiment"],
        "trial": s.api("GET", "/api/v1/trials/1")["trial"],
    }


@pytest.mark.timeout(300)
def test_a_master_killed_mid_run_loses_nothing_acknowledged(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETTUI_DB", pg_url)  # the URL through the environment this time
    headless = Served(tmp_path / "state", tmp_path / "config", extra=["--no-agent"])
    headless.start()
    assert headless.proc is not None
    assert "postgresql" not in " ".join(psutil.Process(headless.proc.pid).cmdline())
    cfg, ctx = write_ctx(tmp_path, CONFIG, {"trial.py": TRIAL})
    agent = start_agent(headless, tmp_path, "--slots", "1", "--id", "pg-agent")
    try:
        headless.wait_for_agents(1)
        headless.cli("e", "create", str(cfg), str(ctx))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            before = _acknowledged(headless)
            if len(before["metrics"]) >= 15 and before["checkpoints"]:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no checkpoint in 120 s: {before}")
        headless.api("PATCH", "/api/v1/experiments/1", {"description": "asked just before"})
        headless.kill9()  # right after that answer, mid-run
        port = int(headless.url.rsplit(":", 1)[1])
        headless.start(port=port)
        after = _acknowledged(headless)
        assert before["metrics"].items() <= after["metrics"].items()
        assert before["checkpoints"].items() <= after["checkpoints"].items()
        assert after["experiment"]["description"] == "asked just before"
        assert after["experiment"]["state"] == before["experiment"]["state"] == "STATE_ACTIVE"
        assert before["trial"]["state"] == "STATE_RUNNING"
        ended = headless.wait_experiment(1, timeout=120)
        assert ended["state"] == "STATE_COMPLETED", ended
        final = _acknowledged(headless)
        assert before["metrics"].items() <= final["metrics"].items()
        assert set(range(1, 61)) <= set(final["metrics"]), "a step is missing"
        assert before["checkpoints"].items() <= final["checkpoints"].items()
        assert final["trial"]["state"] == "STATE_COMPLETED"
        validation = stored(pg_url, "SELECT steps_completed FROM metrics WHERE grp=?",
                            "validation")
        assert validation == [(60,)]
    finally:
        agent.terminate()
        agent.wait(30)
        headless.stop()
