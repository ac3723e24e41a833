"""`dettui serve` refuses a state dir another user owns or others may write, and one whose
token key or store is another user's (review of issue 31's fixes, attacker finding 2): another
local user who made /tmp/shared could read the token key or plant a store with their own
admin. It exits non-zero naming the path and why, before writing anything there.

Runs as root (chown to nobody)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to nobody)")

NOBODY = 65534


def serve(state: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DETTUI_CONFIG_DIR": str(tmp_path / "config")}
    return subprocess.run([sys.executable, "-m", "dettui.cli", "serve", "--state-dir",
                           str(state), "--port", "0", "--no-agent"], capture_output=True,
                          text=True, timeout=60, env=env, cwd=tmp_path)


def test_a_state_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "theirs"
    state.mkdir()
    os.chown(state, NOBODY, NOBODY)
    res = serve(state, tmp_path)
    assert res.returncode != 0, res.stdout
    assert f"refusing to keep the master's state in {state}" in res.stderr, res.stderr
    assert "belongs to uid 65534" in res.stderr
    assert not (state / "secret.key").exists() and not (state / "master.db").exists()


def test_a_state_dir_others_may_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "open"
    state.mkdir()
    state.chmod(0o777)
    res = serve(state, tmp_path)
    assert res.returncode != 0 and "is writable by others (mode 0777)" in res.stderr, res.stderr
    assert list(state.iterdir()) == []


def test_a_planted_token_key_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "mine"
    state.mkdir(mode=0o700)
    key = state / "secret.key"
    key.write_bytes(b"k" * 32)
    os.chown(key, NOBODY, NOBODY)
    res = serve(state, tmp_path)
    assert res.returncode != 0, res.stdout
    assert f"{key} belongs to uid 65534" in res.stderr, res.stderr
