"""What the fork-server benches share: a real `dettui serve` started one way (`--trial-start
fork|fresh`), the serve process's CPU time, a trial's log lines and the agent's start line.

A fork server is started per trial user when that user's first forked trial needs one (~1-2 s:
it imports torch), so every bench runs one trial of the same user before it times anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

WAYS = ("fork", "fresh")
START_RE = re.compile(r"trial started (forked by fork server \d+ in \d+ ms|fresh: .*)")


class Serve:
    """`dettui serve --port 0 --state-dir STATE --trial-start WAY [--agent-slots N]`, in its
    own session; `url` once it listens, `stop()` ends it."""

    def __init__(self, state: Path, way: str, slots: int | None = None) -> None:
        argv = [sys.executable, "-m", "dettui.cli", "serve", "--port", "0", "--state-dir",
                str(state), "--trial-start", way]
        if slots is not None:
            argv += ["--agent-slots", str(slots)]
        self.way = way
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        assert self.proc.stdout is not None
        url = None
        while url is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"dettui serve --trial-start {way} did not start")
            m = re.search(r"listening on (http://\S+)", line)
            url = m.group(1) if m else None
        self.url = url
        self._ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        """CPU seconds (user + system) the serve process (master + embedded agent) has used."""
        t = self._ps.cpu_times()
        return float(t.user + t.system)

    def tree_cpu(self) -> float:
        """CPU seconds of the serve process and everything under it: each live process's own
        time and its waited-for children's (a trial's, once reaped by the agent or by the
        fork server, is in its parent's)."""
        total = 0.0
        for p in [self._ps, *self._ps.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def ready(c: Any) -> None:
    """Logged in as `determined`, with the embedded agent registered."""
    await c.login("determined", "")
    deadline = time.monotonic() + 60
    while not await c.agents():
        if time.monotonic() > deadline:
            raise RuntimeError("the embedded agent never registered")
        await asyncio.sleep(0.05)


async def log_lines(c: Any, trial_id: int, after: int = 0) -> list[dict[str, Any]]:
    """The trial's log lines after line id `after`, oldest first (up to 1,000)."""
    return list(await c.trial_log_page(trial_id, limit=1000, after=after))


def text(line: dict[str, Any]) -> str:
    return str(line.get("log") or line.get("message") or "")


def start_way(lines: Sequence[dict[str, Any]]) -> str:
    """How the agent says the trial started, from its line `dettui: trial started forked by
    fork server N in M ms` or `dettui: trial started fresh: why` (the last among `lines`):
    `forked by fork server N in M ms` or `fresh: why`; '?' when none is there yet."""
    found = "?"
    for line in lines:
        m = START_RE.search(text(line))
        if m:
            found = m.group(1).strip()
    return found


def stamp(line: dict[str, Any]) -> float:
    """A log line's timestamp (the master's for its own lines, the agent's for a trial's)."""
    return datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00")).timestamp()


def stages(lines: Sequence[dict[str, Any]], since: float) -> dict[str, float]:
    """Seconds from `since` to the master's `— attempt N of trial` line (the run scheduled),
    to the agent's `trial started` line (its context, sandbox and fork or exec done) and to
    the script's own `first <time.time()>` line, where those lines are in `lines` (the last of
    each)."""
    out: dict[str, float] = {}
    for line in lines:
        if text(line).startswith("— attempt "):
            out["scheduled"] = stamp(line) - since
        elif START_RE.search(text(line)):
            out["started"] = stamp(line) - since
        elif text(line).startswith("first "):  # the script's own first statement's stamp
            out["script"] = float(text(line).split()[1]) - since
    return out


def servers(ways: Sequence[str]) -> str:
    """How many fork servers forked these trials, said when more than one (a server is replaced
    when a module it loaded changes on disk: the next trial waits for the new one's imports)."""
    pids = {m.group(1) for w in ways if (m := re.search(r"fork server (\d+)", w))}
    return (f"; {len(pids)} fork servers (a server is replaced when a module it loaded "
            "changes on disk: a trial then waits for the new one's imports)"
            if len(pids) > 1 else "")


def fork_ms(way: str) -> float | None:
    m = re.search(r"in (\d+) ms", way)
    return float(m.group(1)) if m and way.startswith("forked") else None


def ms(xs: Sequence[float]) -> str:
    """median (min-max) in ms."""
    return (f"{statistics.median(xs) * 1000:7.1f} ms  ({min(xs) * 1000:.0f}-"
            f"{max(xs) * 1000:.0f})")


def busy() -> float:
    """CPU seconds the whole machine has been busy (every process, every core)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def load() -> str:
    a, b, c = psutil.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f} on {psutil.cpu_count()} cores"
