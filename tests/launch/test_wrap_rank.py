"""wrap_rank: rank prefixes, env-var ranks, exit codes, and signal forwarding, for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dettui.launch.wrap_rank import prefix_lines, resolve_rank


def wrap(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dettui.launch.wrap_rank", *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=30)


def test_prefix_lines_splits_cr_and_lf() -> None:
    out, rest = prefix_lines(b"a\rb\nc", 1)
    assert out == b"[rank=1] a\n[rank=1] b\n"
    assert rest == b"c"


@pytest.mark.parametrize(("spec", "env", "rank"), [
    ("3", {}, 3),
    ("HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK", {"OMPI_COMM_WORLD_RANK": "2"}, 2),
    ("RANK", {"RANK": "5"}, 5),
])
def test_resolve_rank(spec: str, env: dict[str, str], rank: int) -> None:
    assert resolve_rank(spec, env) == rank


def test_every_line_of_both_streams_is_tagged() -> None:
    res = wrap("1", "--", "sh", "-c", "printf 'a\\rb\\n'; echo err >&2; printf tail")
    assert res.stdout == "[rank=1] a\n[rank=1] b\n[rank=1] tail\n"
    assert res.stderr == "[rank=1] err\n"


def test_rank_from_environment_and_missing_rank() -> None:
    assert wrap("MY_RANK", "--", "echo", "x", env={"MY_RANK": "4"}).stdout == "[rank=4] x\n"
    missing = wrap("NOPE_RANK", "--", "echo", "x")
    assert missing.returncode == 1 and "rank not found" in missing.stderr


def test_exit_code_is_the_childs() -> None:
    assert wrap("0", "--", "sh", "-c", "exit 7").returncode == 7


def test_sigterm_is_forwarded() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dettui.launch.wrap_rank", "0", "--", sys.executable, "-c",
         "import signal,sys,time\n"
         "signal.signal(signal.SIGTERM, lambda *a: (print('got term', flush=True), sys.exit(5)))\n"
         "print('ready', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "[rank=0] ready\n"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 5
    assert "[rank=0] got term" in proc.stdout.read()
