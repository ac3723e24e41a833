"""Ctrl-C (issue 31, item 5). On a foreground `dettui serve` it does what `dettui serve --stop`
does: running trials checkpoint and go back to the queue, then the master exits, saying so on
the terminal; a second Ctrl-C stops at once. Ctrl-C while the dashboard waits for the master it
started stops that master and says so, leaving nothing behind.

The terminal's Ctrl-C is a SIGINT to the foreground process: sent here with os.kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dettui import statedir
from tests.conftest import SAMPLE, Served, marked_processes
from tests.poll import until

pytestmark = pytest.mark.slow


def running_trial(s: Served, batches: int = 20) -> None:
    s.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE), "--config",
          "hyperparameters.step_sleep=0.05", "--config", "searcher.max_length.batches=5000")
    until(lambda: s.api("GET", "/api/v1/trials/1")["trial"]["totalBatchesProcessed"],
          "the trial to get going", timeout=60, done=lambda n: n >= batches)


def log_of(s: Served) -> str:
    assert s.log_path is not None
    return s.log_path.read_text()


def test_ctrl_c_on_serve_checkpoints_and_requeues_running_trials(served: Served) -> None:
    running_trial(served)
    assert served.proc is not None
    os.kill(served.proc.pid, signal.SIGINT)
    assert served.proc.wait(120) == 0
    log = log_of(served)
    assert "stopping: running trials checkpoint and stop first (Ctrl-C again to stop now)" \
        in log, log[-3000:]
    assert "1 running trial(s) checkpointed and requeued" in log, log[-3000:]
    assert statedir.holder(served.state_dir) is None
    assert marked_processes() == []
    again = Served(served.state_dir, served.config_dir, extra=["--no-agent"])
    again.start()
    try:
        assert again.api("GET", "/api/v1/trials/1")["trial"]["state"] == "STATE_QUEUED"
        assert again.api("GET", "/api/v1/experiments/1/checkpoints")["checkpoints"], \
            "it checkpointed before it stopped"
        assert "told to stop at step" in again.cli("t", "logs", "1").stdout
    finally:
        again.stop()


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    """The trial ignores the request to checkpoint (a long --stop-timeout would keep the master
    waiting): the second Ctrl-C does not wait for it."""
    s = Served(tmp_path / "state", tmp_path / "config",
               extra=["--agent-slots", "1", "--stop-timeout", "3600"])
    s.start()
    try:
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "stubborn.py").write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
        (ctx / "c.yaml").write_text(
            "name: stubborn\nentrypoint: python3 stubborn.py\nsearcher:\n  name: single\n"
            "  metric: loss\nmax_restarts: 0\nresources:\n  slots_per_trial: 1\n")
        s.cli("e", "create", str(ctx / "c.yaml"), str(ctx))
        until(lambda: s.api("GET", "/api/v1/trials/1")["trial"]["state"], "the trial to run",
              timeout=60, done=lambda state: state == "STATE_RUNNING")
        assert s.proc is not None
        os.kill(s.proc.pid, signal.SIGINT)
        until(lambda: log_of(s), "the first Ctrl-C's line", timeout=30,
              done=lambda log: "Ctrl-C again to stop now" in log)
        os.kill(s.proc.pid, signal.SIGINT)
        assert s.proc.wait(60) == 0, "stopped without waiting an hour for the trial"
        log = log_of(s)
        assert "stopping now: running trials are stopped without a checkpoint" in log, log[-3000:]
        assert statedir.holder(s.state_dir) is None
        until(marked_processes, "the trial's processes to end", timeout=30,
              done=lambda pids: pids == [])
    finally:
        s.stop()


def test_ctrl_c_while_the_dashboard_starts_its_master_stops_that_master(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "DETTUI_CONFIG_DIR": str(tmp_path / "config")}
    env.pop("DET_MASTER", None)
    dash = subprocess.Popen([sys.executable, "-m", "dettui.cli", "--state-dir", str(state),
                             "--port", "0", "--agent-slots", "1"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert dash.stderr is not None
        first = dash.stderr.readline()
        assert first.startswith(f"starting the master of {state}"), first
        dash.send_signal(signal.SIGINT)  # the master takes a second or more to listen
        _, err = dash.communicate(timeout=60)
    finally:
        if dash.poll() is None:
            dash.kill()
    assert dash.returncode == 130, err
    assert "Ctrl-C: stopping the master this dashboard was starting (pid " in err, err
    assert "the master has stopped" in err, err
    assert "Traceback" not in err, err
    assert statedir.holder(state, wait=0) is None, "nothing left running on the state dir"
