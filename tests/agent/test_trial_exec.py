"""The trial's environment reaches the entrypoint's exec, and nothing before it: the file the
agent writes is read back exactly (newlines, `=`, non-ASCII), the entrypoint gets that
environment and no other variable, the file is gone once read, and a missing program is one
line naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dettui.agent import sandbox, trial_exec

ENV = {"PATH": "bin:/usr/bin:/bin", "SECRET": "a=b\nc d", "NAME": "Zoë", "EMPTY": ""}


def test_the_file_reads_back_exactly_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    path = tmp_path / trial_exec.FILE_NAME
    trial_exec.write(path, ENV)
    assert path.stat().st_mode & 0o077 == 0
    assert trial_exec.read(path) == ENV


def test_the_entrypoint_gets_exactly_the_trials_environment(tmp_path: Path) -> None:
    env_tool = shutil.which("env", path=sandbox.SYSTEM_PATH)
    if env_tool is None:
        pytest.skip("no env(1) in the system's directories (install coreutils)")
    path = tmp_path / trial_exec.FILE_NAME
    trial_exec.write(path, ENV)
    res = subprocess.run(trial_exec.command(sys.executable, str(path), [env_tool, "-0"]),
                         capture_output=True, cwd=tmp_path,
                         env=sandbox.stage_environment({"DETTUI_SANDBOX_ARGS": "x"}))
    assert res.returncode == 0, res.stderr
    got = dict(item.split("=", 1) for item in res.stdout.decode().split("\0") if item)
    assert got == ENV
    assert not path.exists()  # no copy of the user's values stays on disk


def test_the_program_is_found_on_the_trials_path_or_named(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "mytool"
    tool.write_text("#!/bin/sh\necho mytool ran with \"$SECRET\"\n")
    tool.chmod(0o755)
    path = tmp_path / trial_exec.FILE_NAME
    trial_exec.write(path, ENV)
    res = subprocess.run(trial_exec.command(sys.executable, str(path), ["mytool"]),
                         capture_output=True, text=True, cwd=tmp_path,
                         env=sandbox.stage_environment({}))
    assert res.stdout == "mytool ran with a=b\nc d\n", res.stderr
    trial_exec.write(path, ENV)
    res = subprocess.run(trial_exec.command(sys.executable, str(path), ["no-such-tool"]),
                         capture_output=True, text=True, cwd=tmp_path,
                         env=sandbox.stage_environment({}))
    assert res.returncode == 127
    assert res.stderr == "dettui: cannot run 'no-such-tool': No such file or directory\n"


def test_the_sandbox_starts_from_the_systems_path_only() -> None:
    env = sandbox.stage_environment({"DETTUI_ALLOCATION_ID": "1.a.1"})
    assert env == {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DETTUI_ALLOCATION_ID": "1.a.1"}
    assert os.path.isabs(sandbox.shell())


def test_a_variable_no_environment_can_hold_is_refused_naming_it(tmp_path: Path) -> None:
    for env in ({"NUL": "a\0b"}, {"": "x"}, {"A=B": "x"}):
        with pytest.raises(ValueError, match="cannot be set"):
            trial_exec.write(tmp_path / trial_exec.FILE_NAME, env)
