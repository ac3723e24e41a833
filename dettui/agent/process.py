"""Process supervision: one process group per allocation, and no process left behind.

The agent makes itself a child subreaper, so processes that escape their parent (torchrun puts
workers in sessions of their own) are re-parented to the agent instead of init. Every process an
allocation starts carries DETTUI_ALLOCATION_ID in its environment; killing an allocation ends
every live process that is a descendant of its root or carries its id.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Iterable

import psutil

log = logging.getLogger("dettui.agent.process")
PR_SET_CHILD_SUBREAPER = 36
MARK = "DETTUI_ALLOCATION_ID"
AGENT_MARK = "DETTUI_AGENT_ID"
INSTANCE_MARK = "DETTUI_AGENT_INSTANCE"  # "<pid>:<start time>" of the agent process
TEST_MARK = "DETTUI_TEST_RUN"  # set by a test run on what it starts, passed down to trials


def instance() -> str:
    """This agent process, as marked on what it starts: its pid and start time."""
    me = psutil.Process()
    return f"{me.pid}:{me.create_time():.3f}"


def _instance_alive(mark: str | None) -> bool:
    if not mark:
        return False
    pid_text, _, started = mark.partition(":")
    try:
        proc = psutil.Process(int(pid_text))
        return f"{proc.create_time():.3f}" == started and _alive(proc)
    except (ValueError, psutil.Error):
        return False


def strays(agent_id: str) -> list[psutil.Process]:
    """Processes an earlier run of this agent left behind (it was SIGKILLed): marked with this
    agent id by an agent process that is gone. Another live agent with the same id (a second
    cluster on this machine) keeps its processes."""
    me = os.getpid()
    out = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.pid != me and env.get(AGENT_MARK) == agent_id \
                    and not _instance_alive(env.get(INSTANCE_MARK)):
                out.append(proc)
        except (psutil.Error, OSError):
            continue
    return [p for p in out if _alive(p)]


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except OSError:
        return False


def _marked(proc: psutil.Process, alloc_id: str, agent_id: str | None) -> bool:
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return False
    return env.get(MARK) == alloc_id and (agent_id is None or env.get(AGENT_MARK) == agent_id)


def members(root_pid: int | None, alloc_id: str, known: Iterable[psutil.Process] = (),
            agent_id: str | None = None) -> list[psutil.Process]:
    """Every live process of the allocation: the root's tree, known pids, and marked processes.

    With `agent_id`, only processes this agent started count: two agents on one machine may
    each run a part of the same multi-node allocation.
    """
    found = {p.pid: p for p in _tree(root_pid, known)}
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid != me and proc.pid not in found and _marked(proc, alloc_id, agent_id):
            found[proc.pid] = proc
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    found.setdefault(child.pid, child)
    return [p for p in found.values() if _alive(p)]


def _tree(root_pid: int | None, known: Iterable[psutil.Process]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    if root_pid is not None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(root_pid)
            found[root.pid] = root
            for child in root.children(recursive=True):
                found[child.pid] = child
    for proc in known:  # Process objects: a pid reused since is not running "as" them
        found.setdefault(proc.pid, proc)
    return list(found.values())


def tree(root_pid: int | None, known: Iterable[psutil.Process] = ()) -> list[psutil.Process]:
    """The live processes under the root and the known ones: `members` without the scan of
    every process's environment (cheap enough to run every second for telemetry)."""
    return [p for p in _tree(root_pid, known) if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def terminate(
    procs: list[psutil.Process], own: set[int], grace: float = 5.0
) -> list[psutil.Process]:
    """SIGTERM every process, wait up to `grace`, SIGKILL the rest; return any survivors.

    `own` are children someone else waits on (asyncio); they are not reaped here.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            reap_orphans(own)
            procs = [p for p in procs if _alive(p)]
            if not procs:
                return []
            time.sleep(0.05)
    return procs


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def reap_orphans(own: set[int]) -> None:
    """Collect exit statuses of re-parented orphans (not of children asyncio is waiting on)."""
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in own:
            continue
        with contextlib.suppress(ChildProcessError, OSError, psutil.Error):
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
