"""Secrets from files, and an agent id that belongs to one credential, with real processes
(issue 29, attacks 3 and 9): `dettui serve --admin-password-file`, whose local agent joins
again after a restart on the same state dir; `dettui agent --token-file`; and a second agent
under the same id with another credential, refused with the master's reason on its stderr.
Neither secret shows in the process list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Served

pytestmark = [pytest.mark.slow, pytest.mark.both_ways]  # trials forked and fresh (conftest)
PASSWORD = "Lab-pass-123"


def private_file(path: Path, text: str) -> Path:
    path.touch(mode=0o600)
    path.write_text(text + "\n")
    return path


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def agent_argv(s: Served, tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dettui.cli", "-m", s.url, "agent", "--id", "gpu-box",
            "--work-dir", str(tmp_path / "work"), *args]


def test_secrets_from_files_and_one_credential_per_agent_id(tmp_path: Path) -> None:
    password = private_file(tmp_path / "admin.pass", PASSWORD)
    s = Served(tmp_path / "state", tmp_path / "config", password=PASSWORD,
               extra=["--admin-password-file", str(password)])
    s.start()  # its local agent joins (start waits for it)
    agent = None
    try:
        assert s.proc is not None and PASSWORD not in cmdline(s.proc.pid)
        s.stop()
        s.start()  # the same state dir: the local agent joins again, with a new credential
        token = s.agent_token()
        agent = subprocess.Popen(
            agent_argv(s, tmp_path, "--token-file", str(private_file(tmp_path / "t", token))),
            env=s.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s.wait_for_agents(2)
        assert token not in cmdline(agent.pid)
        rogue = subprocess.run(agent_argv(s, tmp_path / "rogue"), capture_output=True,
                               text=True, timeout=90,
                               env={**s.env(), "DETTUI_AGENT_TOKEN": s.agent_token()})
        assert rogue.returncode == 1, rogue.stderr
        assert "the master refused agent gpu-box: agent id gpu-box is bound to agent " \
               "credential" in rogue.stderr
        creds = s.api("GET", "/api/v1/agent-credentials", token=s.admin_token())["credentials"]
        assert [(c["agentId"], c["revoked"]) for c in creds] == [
            (creds[0]["agentId"], True), (creds[0]["agentId"], False),  # the local agent's
            ("gpu-box", False), (None, False)]  # the rogue's never bound
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(30)
        s.stop()
