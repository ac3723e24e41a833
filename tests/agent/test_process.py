"""Process supervision with real processes: finding every member of an allocation and ending it,
including processes that left their parent's session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from dettui import lifeline
from dettui.agent import process

RUN = uuid.uuid4().hex[:12]  # this run's allocations: another suite on the machine has its own


def aid(name: str) -> str:
    """An allocation id of this run: members are found machine-wide by their mark, so a fixed
    id would find (and end) another suite's processes."""
    return f"{name}-{RUN}"


def spawn_tree(alloc_id: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{process.MARK: alloc_id})
    script = "setsid sleep 300 & sleep 300 & exec sleep 300"
    return subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True)


def wait_members(root: int, alloc_id: str, n: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = process.members(root, alloc_id)
        if len(found) >= n:
            return found
        time.sleep(0.05)
    raise AssertionError(f"found only {process.members(root, alloc_id)}")


def test_members_include_processes_in_other_sessions() -> None:
    root = spawn_tree(aid("alloc-a"))
    try:
        deadline = time.monotonic() + 10
        while True:  # setsid(1) forks before it calls setsid(): wait until it has
            found = wait_members(root.pid, aid("alloc-a"), 3)
            sessions = {os.getsid(p.pid) for p in found}
            if len(sessions) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(sessions) >= 2, "one sleeper runs in a session of its own"
        assert process.members(None, aid("alloc-a")), "found by their mark alone, without the root"
        assert not process.members(None, aid("alloc-b"))
    finally:
        process.terminate(process.members(root.pid, aid("alloc-a")), {root.pid}, grace=1)
        root.wait(5)


def test_two_agents_on_one_machine_only_find_their_own_part() -> None:
    """Two agents on one host may run parts of the same multi-node allocation."""
    parts = [subprocess.Popen(["sleep", "300"], env=dict(
        os.environ, **{process.MARK: aid("alloc-m"), process.AGENT_MARK: agent}))
        for agent in ("node-a", "node-b")]
    try:
        deadline = time.monotonic() + 10
        while len(process.members(None, aid("alloc-m"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.pid for p in process.members(None, aid("alloc-m"), agent_id="node-a")] == \
            [parts[0].pid]
        assert [p.pid for p in process.members(None, aid("alloc-m"), agent_id="node-b")] == \
            [parts[1].pid]
    finally:
        for p in parts:
            p.kill()
            p.wait(5)


def test_terminate_leaves_nothing() -> None:
    root = spawn_tree(aid("alloc-c"))
    found = wait_members(root.pid, aid("alloc-c"), 3)
    survivors = process.terminate(found, {root.pid}, grace=2)
    root.wait(5)
    assert survivors == []
    assert process.members(None, aid("alloc-c")) == []


def test_terminate_escalates_to_sigkill() -> None:
    env = dict(os.environ, **{process.MARK: aid("alloc-d")})
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
           "print('ok', flush=True); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ok"
    t0 = time.monotonic()
    survivors = process.terminate(process.members(proc.pid, aid("alloc-d")), {proc.pid}, grace=0.5)
    assert survivors == []
    assert proc.wait(5) == -9
    assert time.monotonic() - t0 < 5


def test_strays_are_found_by_agent_mark() -> None:
    env = dict(os.environ, **{process.AGENT_MARK: aid("agent-x")})
    proc = subprocess.Popen(["sleep", "300"], env=env)
    try:
        deadline = time.monotonic() + 5
        while not process.strays(aid("agent-x")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [p.pid for p in process.strays(aid("agent-x"))] == [proc.pid]
        assert process.strays(aid("agent-y")) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_live_agent_with_the_same_id_keeps_its_processes() -> None:
    """Two clusters on one machine may both name their agent after the host."""
    live = dict(os.environ, **{process.AGENT_MARK: aid("agent-z"),
                               process.INSTANCE_MARK: process.instance()})
    dead = dict(os.environ, **{process.AGENT_MARK: aid("agent-z"),
                               process.INSTANCE_MARK: "999999999:1.000"})
    procs = [subprocess.Popen(["sleep", "300"], env=env) for env in (live, dead)]
    try:
        deadline = time.monotonic() + 5
        while not process.strays(aid("agent-z")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [p.pid for p in process.strays(aid("agent-z"))] == [procs[1].pid]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_pdeathsig_prefix_ends_the_child_when_its_parent_is_killed() -> None:
    """The agent starts entrypoints through it (a vfork, not a fork of the whole agent); what it
    starts must still die with the agent, even by SIGKILL."""
    prefix = lifeline.pdeathsig_prefix()
    if not prefix:
        pytest.skip("no setpriv with --pdeathsig on this machine")
    code = ("import subprocess\n"
            f"p = subprocess.Popen({[*prefix, 'sleep', '300']!r})\n"
            "print(p.pid, flush=True)\n"
            "p.wait()\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 10
        while child.name() != "sleep":  # setpriv has exec'd the command, keeping the signal
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        parent.kill()
        parent.wait(5)
    child.wait(10)  # psutil.TimeoutExpired if it outlived its parent
