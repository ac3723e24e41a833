"""Ctrl-C on `dettui t logs N -f` is a reader leaving, not the master's error: the master
logged `internal error on GET /api/v1/trials/N/logs` and a traceback ending in aiohttp's
ClientConnectionResetError when the next lines came."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = pytest.mark.slow


def _ticks(served: Served) -> int:
    lines = served.cli("t", "logs", "1").stdout.splitlines()
    return sum("tick" in line for line in lines)


def test_ctrl_c_on_a_followed_log_is_no_internal_error(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: chatty
        entrypoint: python3 ticker.py
        searcher: {name: single, metric: x, max_length: 1}
        """, {"ticker.py": """
        import time
        for i in range(6000):
            print("tick", i, flush=True)
            time.sleep(0.05)
        """})
    served.cli("e", "create", str(cfg), str(ctx))
    until(lambda: _ticks(served), "the trial's first lines", timeout=60)
    follow = subprocess.Popen(
        [sys.executable, "-m", "dettui.cli", "-m", served.url, "t", "logs", "1", "-f"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=served.env())
    try:
        assert follow.stdout is not None
        until(lambda: "tick" in follow.stdout.readline(), "a followed line", timeout=30)
        follow.send_signal(signal.SIGINT)
        follow.wait(30)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(10)
    # the master wrote (tried to write) the lines that came after the reader left
    seen = _ticks(served)
    until(lambda: _ticks(served), "more lines", timeout=60, done=lambda n: n >= seen + 40)
    served.cli("e", "kill", "1")
    served.wait_experiment(1)
    assert served.log_path is not None
    log = served.log_path.read_text()
    assert "internal error" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
