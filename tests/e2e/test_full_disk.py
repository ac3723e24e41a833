"""A full disk under the state dir (issue 29, attack 6), for real: a small tmpfs is mounted as
the state dir of a `dettui serve` (its local agent's work root, log spools and the default
checkpoint storage are under it too) and filled while a trial logs and reports metrics.

The attack's master answered ~100 "database or disk is full" 500s, the agent's exit reports
500 every 5 s, the experiment stayed ACTIVE until space was freed, and the trial's log lines
and all its metrics were lost (the metric report's 500 raised in the training loop; the spool's
ENOSPC ended the allocation "crashed in the agent"). Now new work is refused naming the full
filesystem and the state dir, the trial runs on, and once space returns every line and every
report arrives exactly once and the experiment completes. A master started on a full disk says
why in one line.

Root only (mounting needs it): skipped otherwise."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_log_flood import trial_lines
from tests.e2e.test_single import write_ctx

pytestmark = pytest.mark.slow
STEPS, LINES = 10, 300  # a step's 300 lines (~30 KiB) overflow what a full tmpfs has left


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("a full disk is made by mounting a small tmpfs, which needs root")
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Take every free byte of the filesystem of `path` (a file that is removed to free it)."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return filler


def test_a_full_disk_under_the_state_dir(tmp_path: Path) -> None:
    with small_disk(tmp_path / "state", "40m") as state:
        s = Served(state, tmp_path / "config", extra=["--agent-slots", "1"])
        try:
            s.start()
            exp = _run_through_a_full_disk(s, state, tmp_path)
            assert exp["state"] == "STATE_COMPLETED", exp  # once space returned
        finally:
            s.stop()


def _run_through_a_full_disk(s: Served, state: Path, tmp_path: Path) -> dict:
    cfg, ctx = write_ctx(tmp_path, """
        name: full-disk
        entrypoint: python3 train.py
        searcher: {name: single, metric: loss, max_length: 1}
        max_restarts: 0
        """, {"train.py": f"""
        import time
        from dettui import core
        with core.init() as ctx:
            for step in range(1, {STEPS + 1}):
                print("\\n".join(f"step {{step}} line {{i}} " + "x" * 80
                                for i in range({LINES})), flush=True)
                ctx.train.report_training_metrics(steps_completed=step,
                                                  metrics={{"loss": 1 / step}})
                time.sleep(0.5)
        """})
    token = s.token()  # a login is a write: taken before the disk fills
    s.cli("e", "create", str(cfg), str(ctx))
    _wait_running(s, token)
    filler = fill(state)
    res = s.cli("e", "create", str(cfg), str(ctx), check=False)
    assert res.returncode != 0
    assert "the master's disk is full" in res.stderr and str(state) in res.stderr, res.stderr
    assert "internal error" not in res.stderr
    time.sleep(STEPS * 0.5 + 3)  # the trial has printed and reported all it will
    exp = s.api("GET", "/api/v1/experiments/1", token=token)["experiment"]
    assert exp["state"] == "STATE_ACTIVE", exp  # not ended in ERROR by the full disk
    filler.unlink()
    exp = s.wait_experiment(1, timeout=90)
    assert exp["state"] == "STATE_COMPLETED", exp
    lines = trial_lines(s, 1)
    counts = Counter(ln for ln in lines if ln.startswith("step "))
    expected = {f"step {st} line {i} " + "x" * 80 + "\n"
                for st in range(1, STEPS + 1) for i in range(LINES)}
    assert set(counts) == expected, f"{len(expected - set(counts))} lines lost"
    assert max(counts.values()) == 1, "a line arrived twice"
    said = "".join(lines)
    assert "dettui: the master cannot take POST /api/v1/trials/1/metrics" in said, said[-3000:]
    assert "dettui: the master took" in said
    metrics = s.api("GET", "/api/v1/trials/1/metrics?group=training")["metrics"]
    assert sorted(m["stepsCompleted"] for m in metrics) == list(range(1, STEPS + 1))
    assert s.log_path is not None
    log = s.log_path.read_text()
    assert "internal error" not in log and "crashed in the agent" not in log, log[-3000:]
    assert "cannot keep its log lines" in log  # the spool met the full disk too
    return exp


def _wait_running(s: Served, token: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        trials = s.api("GET", "/api/v1/experiments/1/trials", token=token)["trials"]
        if trials and trials[0]["state"] == "STATE_RUNNING":
            time.sleep(1)  # its first step is out
            return
        time.sleep(0.2)
    raise AssertionError("the trial did not start")


def serve_briefly(state: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DETTUI_CONFIG_DIR=str(config))
    proc = subprocess.Popen([sys.executable, "-m", "dettui.cli", "serve", "--port", "0",
                             "--no-agent", "--state-dir", str(state)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the listening line, or "" when it exits
    m = re.search(r"listening on (http://\S+)", first)
    if m is None:
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, first + out, err)
    try:  # its store opened without a byte to spare (its files were all there): a write
        # must be refused, naming the full disk, where the CLI shows it
        req = urllib.request.Request(m.group(1) + "/api/v1/auth/login", method="POST",
                                     data=b'{"username": "determined", "password": ""}')
        try:
            urllib.request.urlopen(req, timeout=30).read()
            answer = (200, "")
        except urllib.error.HTTPError as exc:
            answer = (exc.code, exc.read().decode())
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, -1, first + out,
                                       f"({answer[0]}, {answer[1]}\n{err}")


def test_a_master_started_on_a_full_disk_says_why(tmp_path: Path) -> None:
    """A new state dir (the key cannot be written: it was left empty, then called damaged at
    the next start) and a used one (SQLite cannot make its shared-memory file: a traceback
    ending in 'disk I/O error')."""
    with small_disk(tmp_path / "disk", "4m") as disk:
        used = disk / "used"
        s = Served(used, tmp_path / "config", extra=["--no-agent"])
        try:
            s.start()
        finally:
            s.stop()
        filler = fill(disk)
        for state in (disk / "new", used):
            res = serve_briefly(state, tmp_path / "config")
            if res.returncode == -1:  # the used dir's store opened with no byte to spare
                assert state == used and res.stderr.startswith("(503, "), res.stderr
                assert "the master's disk is full" in res.stderr, res.stderr
                assert "Traceback" not in res.stderr, res.stderr  # its exit too
                continue
            assert res.returncode == 1, res.stdout + res.stderr
            assert "Traceback" not in res.stderr, res.stderr
            assert re.search(r"the master's disk is full: the filesystem at \S+, which holds "
                             rf"its state dir {re.escape(str(state))}, has 0 KiB free",
                             res.stderr), res.stderr
        filler.unlink()
        for state in (disk / "new", used):  # and once there is room, both start
            s = Served(state, tmp_path / "config", extra=["--no-agent"])
            try:
                s.start()
                assert s.api("GET", "/api/v1/experiments")["experiments"] == []
            finally:
                s.stop()
