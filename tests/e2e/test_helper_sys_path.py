"""The Python processes dettui starts never import from the working directory (review of
issue 31, attacker finding 4): `python -m` puts the working directory first on sys.path, so
`dettui serve` run (as root) from a directory holding a hostile yaml.py had its worker processes
import it, and the master a dashboard starts imported a stray html.py. Each helper runs with
-P: here both start from such a directory, do their work, and no hostile module runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import SAMPLE, Served

pytestmark = pytest.mark.slow

HOSTILE = """\
import os, pathlib
pathlib.Path({marks!r}, f"{{__name__}}-{{os.getpid()}}").write_text("imported")
raise ImportError("a hostile module in the working directory")
"""
MODULES = ("yaml", "html", "pydantic", "aiohttp", "ruamel", "psutil", "textual")


def hostile_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A working directory full of modules that leave a mark when imported; the marks' dir."""
    cwd, marks = tmp_path / "cwd", tmp_path / "marks"
    cwd.mkdir()
    marks.mkdir()
    for name in MODULES:
        (cwd / f"{name}.py").write_text(HOSTILE.format(marks=str(marks)))
    return cwd, marks


def workers_of(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True)
            if "dettui.master.offload_worker" in " ".join(p.cmdline())]


def test_serve_from_a_hostile_directory_imports_nothing_from_it(tmp_path: Path) -> None:
    cwd, marks = hostile_dir(tmp_path)
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--no-agent"])
    dettui = str(Path(sys.executable).parent / "dettui")  # the command a user runs
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - closed below
    s.proc = subprocess.Popen([dettui, "serve", "--port", "0", "--no-agent", "--state-dir",
                               str(s.state_dir)], cwd=cwd, stdout=subprocess.PIPE, stderr=log,
                              text=True, env=s.env(), start_new_session=True)
    try:
        assert s.proc.stdout is not None
        line = s.proc.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        assert found, (line, (tmp_path / "serve.log").read_text()[-3000:])
        s.url = found.group(1)
        # the config is parsed in a worker process
        s.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))
        assert len(workers_of(s.proc.pid)) >= 1
    finally:
        s.stop()
        log.close()
    assert sorted(os.listdir(marks)) == []


def test_the_master_a_dashboard_starts_imports_nothing_from_its_directory(
        tmp_path: Path) -> None:
    cwd, marks = hostile_dir(tmp_path)
    state = tmp_path / "state"
    env = {**os.environ, "DETTUI_CONFIG_DIR": str(tmp_path / "config")}
    env.pop("DET_MASTER", None)
    start = ("import sys; from pathlib import Path; from dettui.commands import dashboard; "
             "print(dashboard.ensure_master(Path(sys.argv[1]), port=0, slots=1).url)")
    res = subprocess.run([sys.executable, "-P", "-c", start, str(state)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    try:
        assert res.returncode == 0, res.stderr + (state / "master.log").read_text()[-3000:]
        url = res.stdout.strip()
        created = subprocess.run(
            [sys.executable, "-P", "-m", "dettui.cli", "-m", url, "e", "create", "--paused",
             str(SAMPLE / "single.yaml"), str(SAMPLE)], env=env, capture_output=True,
            text=True, timeout=120)
        assert created.returncode == 0, created.stderr
    finally:
        stopped = subprocess.run([sys.executable, "-P", "-m", "dettui.cli", "serve", "--stop",
                                  "--state-dir", str(state)], env=env, capture_output=True,
                                 text=True, timeout=180)
    assert stopped.returncode == 0, stopped.stderr
    assert sorted(os.listdir(marks)) == []
