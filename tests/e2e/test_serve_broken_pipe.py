"""Ctrl-C on a piped `dettui serve` (review of issue 31, N1): under `dettui serve 2>&1 | cat`
the terminal's Ctrl-C ends `cat` too, so every line the master writes after it meets a closed
pipe. The first Ctrl-C must still let running trials checkpoint and exit, the second must stop
at once: a write that fails never stops the signal's work.

Here serve's stdout and stderr are one pipe whose read end the test closes, then SIGINT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dettui import statedir
from tests.conftest import STARTED, Served
from tests.poll import until

pytestmark = pytest.mark.slow


def piped_serve(tmp_path: Path, *extra: str) -> Served:
    """`dettui serve 2>&1 | cat`: stdout and stderr one pipe, read by the test until the master
    listens (and its agent joined), then closed as a dead `cat` leaves it."""
    s = Served(tmp_path / "state", tmp_path / "config", extra=list(extra))
    STARTED.append(s)
    s.proc = subprocess.Popen(
        [sys.executable, "-m", "dettui.cli", "serve", "--port", "0", "--state-dir",
         str(s.state_dir), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=s.env(), start_new_session=True)
    assert s.proc.stdout is not None
    deadline = time.monotonic() + 30
    while not s.url and time.monotonic() < deadline:
        line = s.proc.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            s.url = found.group(1)
        elif not line and s.proc.poll() is not None:
            raise RuntimeError("dettui serve exited before it listened")
    assert s.url, "dettui serve did not listen in 30 s"
    s.wait_for_agents(0 if "--no-agent" in extra else 1)
    return s


def close_reader(s: Served) -> None:
    assert s.proc is not None and s.proc.stdout is not None
    s.proc.stdout.close()


def test_ctrl_c_stops_a_serve_whose_pipe_reader_is_gone(tmp_path: Path) -> None:
    s = piped_serve(tmp_path, "--agent-slots", "1")
    try:
        close_reader(s)
        assert s.proc is not None
        os.kill(s.proc.pid, signal.SIGINT)
        assert s.proc.wait(60) == 0, "the first Ctrl-C stops the master"
        assert statedir.holder(s.state_dir, wait=0) is None
    finally:
        s.stop()


STUBBORN = """\
import time
from dettui import core

with core.init() as ctx:
    while not ctx.preempt.should_preempt():
        time.sleep(0.1)
    print("asked to checkpoint and stop", flush=True)
    while True:
        time.sleep(0.1)
"""


def test_the_second_ctrl_c_stops_at_once_with_the_pipe_reader_gone(tmp_path: Path) -> None:
    """The first Ctrl-C asks the running trial to checkpoint (it says so in its log, and
    then ignores it); the second stops the master without waiting the hour of
    --stop-timeout."""
    s = piped_serve(tmp_path, "--agent-slots", "1", "--stop-timeout", "3600")
    try:
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "stubborn.py").write_text(STUBBORN)
        (ctx / "c.yaml").write_text(
            "name: stubborn\nentrypoint: python3 stubborn.py\nsearcher:\n  name: single\n"
            "  metric: loss\nmax_restarts: 0\nresources:\n  slots_per_trial: 1\n")
        s.cli("e", "create", str(ctx / "c.yaml"), str(ctx))
        until(lambda: s.api("GET", "/api/v1/trials/1")["trial"]["state"], "the trial to run",
              timeout=60, done=lambda state: state == "STATE_RUNNING")
        close_reader(s)
        assert s.proc is not None
        os.kill(s.proc.pid, signal.SIGINT)
        until(lambda: s.cli("t", "logs", "1").stdout, "the trial asked to checkpoint",
              timeout=60, done=lambda log: "asked to checkpoint and stop" in log)
        assert s.proc.poll() is None, "the first Ctrl-C waits for the trial"
        os.kill(s.proc.pid, signal.SIGINT)
        assert s.proc.wait(60) == 0, "the second Ctrl-C stops at once"
        assert statedir.holder(s.state_dir, wait=0) is None
    finally:
        s.stop()
