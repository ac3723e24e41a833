"""The dashboard in a real terminal: tmux runs `dettui`, keys go in with send-keys, the screen
comes back with capture-pane. A job is moved and its experiment opened; dashboards share their
state dir's master, and quitting with work running leaves it in the background or stops it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dettui import statedir
from tests.conftest import SAMPLE, Served, marked_processes
from tests.poll import until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


class Tmux:
    """`dettui ARGS` in a tmux session of its own; when it exits, the pane says EXITED and
    its exit code, and keeps what it printed."""

    def __init__(self, env: dict[str, str], *args: str, size: tuple[int, int] = (160, 50)) -> None:
        self.name = f"dettui-{uuid.uuid4().hex[:8]}"
        kept = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                        if k.startswith(("DETTUI_", "DET_", "PATH", "HOME")))
        argv = " ".join(shlex.quote(a) for a in args)
        cmd = (f"env {kept} {shlex.quote(sys.executable)} -m dettui.cli {argv}; "
               "echo EXITED $?; sleep 600")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(size[0]),
                        "-y", str(size[1]), cmd], check=True)

    def dashboard_pid(self) -> int:
        """The dashboard's process (the pane runs a shell that runs it)."""
        shell = int(subprocess.run(["tmux", "display", "-p", "-t", self.name, "#{pane_pid}"],
                                   capture_output=True, text=True, check=True).stdout)
        kids = psutil.Process(shell).children()
        assert kids, "the dashboard is not running"
        return kids[0].pid

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The screen, once `text` is on it."""
        return until(self.screen, f"{text!r} on the screen", timeout=timeout,
                     done=lambda screen: text in screen)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def tmux(served: Served) -> Iterator[Tmux]:
    t = Tmux(served.env(), "--master", served.url)
    try:
        yield t
    finally:
        t.close()


def job_ids(s: Served) -> list[str]:
    return [j["jobId"] for j in json.loads(s.cli("job", "list", "--json").stdout)]


def test_move_a_job_and_open_its_experiment_in_a_real_terminal(served: Served,
                                                                tmux: Tmux) -> None:
    for _ in range(2):
        served.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))
    first, second = job_ids(served)
    screen = tmux.wait_for("Job queue: 2 jobs")
    assert "question_mark" not in screen and "? Help" in screen
    assert first[:8] in screen and second[:8] in screen
    assert screen.index(first[:8]) < screen.index(second[:8])
    tmux.keys("Down")
    tmux.keys("K")  # the second job moves ahead of the first
    deadline = time.monotonic() + 30
    while job_ids(served) != [second, first]:
        assert time.monotonic() < deadline, "the job never moved"
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while True:
        screen = tmux.screen()
        if screen.index(second[:8]) < screen.index(first[:8]):
            break
        assert time.monotonic() < deadline, screen
        time.sleep(0.2)
    tmux.keys("Enter")
    screen = tmux.wait_for("Experiment 2 spirals-mlp")
    assert "PAUSED" in screen
    tmux.keys("Escape")
    tmux.wait_for("Job queue")
    tmux.keys("q")


def test_dashboards_share_their_master_and_quitting_leaves_work_running(tmp_path: Path) -> None:
    """Two dashboards on one state dir see one master and one queue; quitting the last with a
    trial running asks; `b` leaves it in the background, where it survives the terminals
    closing and even a dashboard killed outright; a new dashboard attaches; `s` stops it all,
    the trial checkpointing first."""
    state = tmp_path / "state"
    env = {**os.environ, "DETTUI_CONFIG_DIR": str(tmp_path / "config")}
    args = ("--state-dir", str(state), "--port", "0", "--agent-slots", "2")
    sessions: list[Tmux] = []

    def dashboard() -> Tmux:
        sessions.append(Tmux(env, *args, size=(120, 40)))
        return sessions[-1]

    holder = None
    try:
        first = dashboard()
        first.wait_for("Job queue: 0 jobs")
        holder = statedir.holder(state)
        assert holder is not None and holder.mode == statedir.BACKGROUND
        assert holder.pid != first.dashboard_pid(), "the master runs in a process of its own"
        cli = {**env, "DET_MASTER": holder.url}
        run = subprocess.run([sys.executable, "-m", "dettui.cli", "e", "create",
                              str(SAMPLE / "single.yaml"), str(SAMPLE), "--config",
                              "hyperparameters.step_sleep=0.1", "--config",
                              "searcher.max_length.batches=5000", "--config",
                              "min_validation_period.batches=10"],
                             env=cli, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        trial_running(cli)
        second = dashboard()  # attaches: the same master, the same queue, no second agent
        screen = second.wait_for("Job queue: 1 job")
        assert f"pid {holder.pid}" in screen and "spirals-mlp (1)" in screen
        first.wait_for("SCHEDULED")  # the first dashboard shows the same job running
        second.keys("q")
        assert "goes on for the other dashboard" in second.wait_for("EXITED 0")
        first.keys("q")
        first.wait_for("Work is running on this master: 1 trial running")
        first.keys("b")
        assert "goes on in the background" in first.wait_for("EXITED 0")
        for t in sessions:
            t.close()  # the terminals close; the master is in its own session
        assert holder.alive and trial_running(cli)
        third = dashboard()
        assert f"pid {holder.pid}" in third.wait_for("Job queue: 1 job")
        os.kill(third.dashboard_pid(), signal.SIGKILL)  # the UI dies outright
        lines = log_lines(cli)
        deadline = time.monotonic() + 30
        while log_lines(cli) <= lines:
            assert time.monotonic() < deadline, "the trial's logs stopped"
            time.sleep(0.5)
        assert trial_running(cli), "the master and the trial went on"
        last = dashboard()
        last.wait_for("Job queue: 1 job")
        last.keys("q")
        last.wait_for("Work is running on this master")
        last.keys("s")
        assert "has stopped" in last.wait_for("EXITED 0", timeout=120)
        assert statedir.holder(state) is None and not holder.alive
        assert marked_processes() == []
        log = (state / "master.log").read_text()
        assert "1 running trial(s) checkpointed and requeued" in log, log[-2000:]
    finally:
        for t in sessions:
            t.close()
        if holder is not None and holder.alive:
            os.kill(holder.pid, signal.SIGKILL)


def trial_running(env: dict[str, str], timeout: float = 90) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        res = subprocess.run([sys.executable, "-m", "dettui.cli", "t", "describe", "1",
                              "--json"], env=env, capture_output=True, text=True, timeout=60)
        if res.returncode == 0 and json.loads(res.stdout)["state"] == "STATE_RUNNING":
            return True
        assert time.monotonic() < deadline, f"trial 1 is not running: {res.stdout}{res.stderr}"
        time.sleep(0.5)


def log_lines(env: dict[str, str]) -> int:
    res = subprocess.run([sys.executable, "-m", "dettui.cli", "t", "logs", "1"], env=env,
                         capture_output=True, text=True, timeout=60)
    return res.stdout.count("\n")
