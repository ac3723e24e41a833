"""Which master the dashboard uses (issue 31, item 2), in a real terminal: when the default
port is another master's, the master it starts takes a free port and the dashboard says so (a
notification, and the header's URL); $DET_MASTER wins over the state dir, as for the CLI.

The default address is stood in for by a master of the test's own on a free port
(`dettui.client.DEFAULT_MASTER` set before the dashboard starts): 8080 may be anyone's."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dettui import statedir
from tests.conftest import Served
from tests.poll import until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

RUN = ("import sys, dettui.client as c; c.DEFAULT_MASTER = sys.argv[1]; "
       "from dettui import cli; sys.exit(cli.main(sys.argv[2:]))")


class Terminal:
    """`dettui ARGS` (with a stand-in default master) in a tmux session of its own."""

    def __init__(self, env: dict[str, str], default: str, *args: str) -> None:
        self.name = f"dettui-{uuid.uuid4().hex[:8]}"
        kept = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                        if k.startswith(("DETTUI_", "DET_", "PATH", "HOME")))
        argv = " ".join(shlex.quote(a) for a in (sys.executable, "-c", RUN, default, *args))
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "50",
                        f"env -i {kept} {argv}; echo EXITED $?; sleep 600"], check=True)

    def screen(self) -> str:
        """What the terminal shows, lines it wrapped joined again."""
        return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def wait_for(self, *texts: str, timeout: float = 60) -> str:
        return until(self.screen, f"{texts!r} on the screen", timeout=timeout,
                     done=lambda screen: all(t in " ".join(screen.split()) for t in texts))

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def foreign(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "foreign-state", tmp_path / "foreign-config", extra=["--no-agent"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def user_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DET_MASTER", "DET_USER",
                                                            "DET_PASS")}
    env["DETTUI_CONFIG_DIR"] = str(tmp_path / "config")
    return env


def test_the_dashboard_says_which_master_when_the_default_port_is_taken(foreign: Served,
                                                                        tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = foreign.url.rsplit(":", 1)[1]
    term = Terminal(user_env(tmp_path), foreign.url, "--state-dir", str(state), "--port", port,
                    "--agent-slots", "1")
    try:
        holder = until(lambda: statedir.holder(state, wait=0), "the dashboard's master",
                       timeout=60)
        assert holder.url != foreign.url, "it took another port"
        note = (f"using the master of {state} at {holder.url} ({foreign.url} is not this "
                "state dir's master; -m URL picks another)")
        term.wait_for(f"{holder.url} (pid {holder.pid}) as determined", "Job queue",
                      "which master", "using the master of")  # a notification
        term.keys("q")  # idle: its master stops with it
        after = term.wait_for("EXITED 0")  # what it printed before the dashboard opened
        assert note in after.splitlines(), after
    finally:
        term.close()
        if holder is not None and holder.alive:
            os.kill(holder.pid, 9)


def test_det_master_wins_over_the_state_dir(foreign: Served, tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**user_env(tmp_path), "DET_MASTER": foreign.url}
    term = Terminal(env, "http://127.0.0.1:1", "--state-dir", str(state))
    try:
        term.wait_for(f"{foreign.url} as determined", "Job queue")
        assert "which master" not in term.screen()
        assert statedir.holder(state, wait=0) is None, "no master started on the state dir"
        term.keys("q")
        term.wait_for("EXITED 0")
    finally:
        term.close()
