"""A trial's start is one line in the log, and `ps` shows a short line for its sandbox: the
sandbox's 2.5 KB shell script went to the master's log at INFO on every start, and stood in
the sandbox's command line for `ps` and `htop` to show."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from dettui.agent import sandbox
from tests.conftest import Served, marked_processes
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = pytest.mark.slow
SHORT = 300  # characters: a line `ps` shows whole


def _allocation_processes() -> list[psutil.Process]:
    out = []
    for pid in marked_processes():
        try:
            out.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def test_a_trial_start_is_one_short_line(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: quiet
        entrypoint: python3 sleeper.py
        searcher: {name: single, metric: x, max_length: 1}
        """, {"sleeper.py": """
        import os, time
        print("sandbox vars", sorted(k for k in os.environ if k.startswith("DETTUI_SANDBOX")),
              flush=True)
        time.sleep(600)
        """})
    served.cli("e", "create", str(cfg), str(ctx))
    trial = until(lambda: served.api("GET", "/api/v1/experiments/1/trials")["trials"] or None,
                  "the trial", timeout=60)[0]
    procs = until(lambda: [p for p in _allocation_processes()
                           if "sleeper.py" in " ".join(p.cmdline())] and _allocation_processes(),
                  "the trial's processes", timeout=60)
    lines = {p.pid: " ".join(p.cmdline()) for p in procs}
    assert all(len(line) < SHORT for line in lines.values()), lines
    assert not any("make-rprivate" in line for line in lines.values()), lines
    if sandbox.probe().on:
        assert any(f"dettui-sandbox trial {trial['id']}" in line for line in lines.values()), lines
    assert served.log_path is not None
    log_path = served.log_path
    log = until(log_path.read_text, "the start's log line", timeout=30,
                done=lambda text: " started: " in text)
    started = [line for line in log.splitlines() if " started: " in line]
    assert len(started) == 1 and len(started[0]) < SHORT, started
    assert re.search(rf"trial {trial['id']} allocation \S+ started: python3 sleeper.py "
                     r"\(1 slot, user \S+; (forked by fork server \d+ in \d+ ms|fresh: .+)\)",
                     started[0]), started
    assert "make-rprivate" not in log
    out = until(lambda: served.cli("t", "logs", str(trial["id"])).stdout,
                "the trial's first line", timeout=30, done=lambda text: "sandbox vars" in text)
    assert "sandbox vars []" in out, out
    served.cli("e", "kill", "1")
