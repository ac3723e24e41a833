"""The dashboard says when its master is gone (issue 31, item 4): a master killed with SIGKILL,
or one that hangs with its socket open, puts a banner on every screen ("master URL unreachable
since HH:MM:SS, retrying") within seconds, the rows stay (marked STALE in the title, never
emptied), and when the master is back the screens fill again from it, live."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.conftest import SAMPLE, Served
from tests.poll import until
from tests.tui.test_tmux import Tmux, job_ids, pytestmark  # noqa: F401 - slow, needs tmux

BANNER = "unreachable since"
DETECTED = 10.0  # s: a no-hang bound; the stream notices a closed socket at once and a silent
# master after its heartbeat (4 s) and half of it without a pong


@pytest.fixture
def dashboard(headless: Served) -> Iterator[Tmux]:
    t = Tmux(headless.env(), "--master", headless.url, size=(140, 40))
    try:
        yield t
    finally:
        t.close()


def create(served: Served, n: int) -> None:
    for _ in range(n):  # no agent: each stays QUEUED
        served.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE))


def banner_gone(t: Tmux) -> str:
    return until(t.screen, "the banner to go", timeout=60,
                 done=lambda s: BANNER not in s and "STALE" not in s)


def test_a_killed_master_is_a_banner_on_every_screen_and_the_rows_come_back(
        headless: Served, dashboard: Tmux) -> None:
    create(headless, 2)
    jobs = job_ids(headless)
    dashboard.wait_for("Job queue: 2 jobs")
    dashboard.keys("2")
    dashboard.wait_for("Experiments: 2")
    dashboard.keys("1")
    dashboard.wait_for("Job queue: 2 jobs")

    headless.kill9()
    killed = time.monotonic()
    screen = dashboard.wait_for(BANNER, timeout=DETECTED)
    print(f"banner after {time.monotonic() - killed:.2f} s")
    assert f"master {headless.url} unreachable since" in screen and "retrying" in screen
    words = " ".join(screen.split())  # the banner wraps in 80 columns
    assert "(the master closed the connection)" in words or "(connection refused)" in words, \
        screen
    assert "STALE" in screen, "the title does not say the rows are stale"
    assert all(j[:8] in screen for j in jobs), "the rows went with the master"
    assert "Job queue: 2 jobs" in screen

    dashboard.keys("2")  # every screen: the experiments keep their rows too
    screen = dashboard.wait_for("Experiments: 2")
    assert BANNER in screen and "STALE" in screen and "spirals-mlp" in screen, screen

    dashboard.keys("3")  # a screen first shown while the master is away says so
    screen = dashboard.wait_for("NOT READ YET")
    assert BANNER in screen and "Cluster" in screen, screen
    dashboard.keys("2")
    dashboard.wait_for("Experiments: 2")
    dashboard.keys("Enter")  # an experiment opened while the master is away
    screen = dashboard.wait_for("Experiment 2")
    assert BANNER in screen, screen

    port = urlsplit(headless.url).port
    assert port is not None
    headless.start(port=port)  # the same state dir, the same port
    screen = banner_gone(dashboard)
    screen = dashboard.wait_for("Experiment 2 spirals-mlp: ACTIVE")  # read once it is back
    dashboard.keys("Escape")
    screen = dashboard.wait_for("Experiments: 2")
    assert BANNER not in screen and "STALE" not in screen, screen
    create(headless, 1)  # live again: a new experiment shows up
    dashboard.wait_for("Experiments: 3")
    dashboard.keys("1")
    screen = dashboard.wait_for("Job queue: 3 jobs")
    assert BANNER not in screen


def test_a_hung_master_is_a_banner_too(headless: Served, dashboard: Tmux) -> None:
    """SIGSTOP: the socket stays open, nothing answers; the stream's ping gets no pong."""
    create(headless, 1)
    dashboard.wait_for("Job queue: 1 job")
    assert headless.proc is not None
    os.killpg(headless.proc.pid, signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        screen = dashboard.wait_for(BANNER, timeout=DETECTED)
        print(f"banner after {time.monotonic() - stopped:.2f} s")
        assert "Job queue: 1 job" in screen and "STALE" in screen
        assert "(no answer to the stream's heartbeat)" in " ".join(screen.split()), screen
    finally:
        os.killpg(headless.proc.pid, signal.SIGCONT)
    screen = banner_gone(dashboard)
    assert "Job queue: 1 job" in screen
