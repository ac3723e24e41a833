"""The dashboard in a real terminal: tmux runs `dettui --master URL`, keys go in with
send-keys, the screen comes back with capture-pane. A job is moved and its experiment opened."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import SAMPLE, Served

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


class Tmux:
    def __init__(self, served: Served) -> None:
        self.name = f"dettui-{uuid.uuid4().hex[:8]}"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in served.env().items()
                       if k.startswith(("DETTUI_", "DET_", "PATH", "HOME")))
        cmd = f"env {env} {shlex.quote(sys.executable)} -m dettui.cli --master {served.url}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "50",
                        cmd], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def tmux(served: Served) -> Iterator[Tmux]:
    t = Tmux(served)
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
