"""When the state dir's master is gone (review of issue 31, N5): after a kill -9 of the master
of a state dir, a command without -m says that no master runs on that state dir and where the
last one was, rather than that it cannot reach http://127.0.0.1:8080; `-m PORT` is this host's
port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import Served
from tests.e2e.test_which_master import RUN, plain_env

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dettui(default: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-c", RUN, default, *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_a_killed_state_dir_master_is_named_with_its_last_address(headless: Served,
                                                                  tmp_path: Path) -> None:
    env = plain_env(tmp_path / "user-config")
    default = f"http://127.0.0.1:{free_port()}"
    port = urlsplit(headless.url).port
    by_port = dettui(default, "-m", str(port), "e", "list", "--json", env=env)
    assert by_port.returncode == 0 and by_port.stdout.strip() == "[]", by_port.stderr
    headless.kill9()
    state = headless.state_dir
    res = dettui(default, "--state-dir", str(state), "e", "list", env=env)
    assert res.returncode == 1, res.stderr
    assert res.stderr == (
        f"Master unreachable: no master runs on {state} (the last one was at {headless.url}), "
        f"nor at {default}; start one with `dettui serve` or `dettui`, or give its address "
        "with -m or DET_MASTER\n")
