"""Multi-host for real: the master and two agents on three "hosts", each a network namespace
this test creates (names unique to the run), joined by veth pairs to a bridge in the master's
namespace, on a random 10.x.y.0/24 that exists nowhere else. The master listens on its bridge
address only (so it needs an admin password), each agent finds the address it advertises from
its route to the master, and the launcher picks the interface that reaches the chief for gloo.

Namespaces share the filesystem, so the master's shared_fs checkpoint directory is reachable
from both nodes; everything else (the master's API, the rendezvous, gloo) goes over the veths.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from tests.conftest import RUN, TEST_MARK, Served
from tests.e2e.test_distributed import check_shards, run_ddp
from tests.e2e.test_single import _marked_processes, write_ctx
from tests.poll import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CLONE_NEWNET = 0x40000000
PASSWORD = "veth-only-secret"
NODES = ("node-a", "node-b")
T = TypeVar("T")


def _ip(*args: str) -> str:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout


def _why_not() -> str | None:
    """Why this machine cannot run the test (None: it can)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root (ip netns add); run the suite as root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed, so there is no `ip netns`"
    probe = f"dettui-probe-{uuid.uuid4().hex[:8]}"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as exc:
        return f"`ip netns` is not usable here: {exc}"
    _ip("netns", "del", probe)
    return None


def _ours(tag: str) -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines()
            if line.startswith(f"dettui-{tag}-")]


@dataclass
class Hosts:
    """Three namespaces: `hub` (the bridge and the master) and one per node."""

    tag: str
    net: str  # the first three octets of the test's /24
    names: dict[str, str] = field(default_factory=dict)

    def address(self, role: str) -> str:
        return f"{self.net}.{['hub', *NODES].index(role) + 1}"

    def interface(self, role: str) -> str:
        return f"veth-{role[-1]}"  # node-a -> veth-a (names are per namespace)

    def prefix(self, role: str) -> list[str]:
        return ["ip", "netns", "exec", self.names[role]]


def _end_processes_in(ns: str) -> None:
    """SIGKILL whatever still runs in one of this test's namespaces (only this test's own
    processes can be there: the namespace's name is unique to this run)."""
    with contextlib.suppress(RuntimeError):
        for pid in {int(p) for p in _ip("netns", "pids", ns).split()}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    with contextlib.suppress(RuntimeError):
        while _ip("netns", "pids", ns).split() and time.monotonic() < deadline:
            time.sleep(0.05)


@contextlib.contextmanager
def hosts() -> Iterator[Hosts]:
    tag = uuid.uuid4().hex[:8]
    h = Hosts(tag, f"10.{random.randrange(256)}.{random.randrange(256)}",
              {role: f"dettui-{tag}-{role}" for role in ("hub", *NODES)})
    hub = h.names["hub"]
    try:
        for ns in h.names.values():
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{h.address('hub')}/24", "dev", "br0")
        _ip("-n", hub, "link", "set", "br0", "up")
        for role in NODES:
            port, dev = f"port-{role[-1]}", h.interface(role)
            _ip("-n", hub, "link", "add", port, "type", "veth", "peer", "name", dev,
                "netns", h.names[role])
            _ip("-n", hub, "link", "set", port, "master", "br0", "up")
            _ip("-n", h.names[role], "addr", "add", f"{h.address(role)}/24", "dev", dev)
            _ip("-n", h.names[role], "link", "set", dev, "up")
        yield h
    finally:
        for ns in _ours(tag):
            _end_processes_in(ns)
            _ip("netns", "del", ns)  # takes its veths (and their peers) with it


def _enter_netns(name: str) -> None:
    """Move the calling thread (only it) into the named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name} failed")
    finally:
        os.close(fd)


@dataclass
class NetnsServed(Served):
    """A master in the hub namespace: the test's own requests go through a thread that lives
    in that namespace (the root namespace has no route to the test's 10.x network)."""

    thread: ThreadPoolExecutor | None = None

    def run_in_hub(self, fn: Callable[[], T]) -> T:
        assert self.thread is not None
        return self.thread.submit(fn).result()

    def urlopen(self, req: urllib.request.Request, timeout: float) -> bytes:
        return self.run_in_hub(lambda: Served.urlopen(self, req, timeout))


def start_agent(s: Served, h: Hosts, role: str, work: Path) -> subprocess.Popen[str]:
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [*h.prefix(role), sys.executable, "-m", "dettui.cli", "-m", s.url, "agent",
         "--work-dir", str(work / "agent-work"), "--token", s.agent_token(role), "--id", role,
         "--slots", "1"],
        env=s.env(), stdout=subprocess.DEVNULL, stderr=open(work / "agent.log", "a"),  # noqa: SIM115
        text=True, start_new_session=True)


@contextlib.contextmanager
def cluster(h: Hosts, tmp_path: Path) -> Iterator[NetnsServed]:
    hub = h.address("hub")
    refused = subprocess.run(
        [*h.prefix("hub"), sys.executable, "-m", "dettui.cli", "serve", "--host", hub,
         "--port", "0", "--state-dir", str(tmp_path / "refused"), "--no-agent"],
        capture_output=True, text=True, timeout=60,
        env={**{k: v for k, v in os.environ.items() if k != "DETTUI_ADMIN_PASSWORD"},
             "DETTUI_CONFIG_DIR": str(tmp_path / "config")})
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"refusing to listen on {hub}" in refused.stderr

    s = NetnsServed(tmp_path / "state", tmp_path / "config",
                    extra=["--no-agent", "--host", hub, "--admin-password", PASSWORD],
                    password=PASSWORD, prefix=h.prefix("hub"))
    s.thread = ThreadPoolExecutor(1, initializer=_enter_netns, initargs=(h.names["hub"],))
    agents: list[subprocess.Popen[str]] = []
    try:
        s.start()
        agents = [start_agent(s, h, role, tmp_path / role) for role in NODES]
        s.wait_for_agents(2)
        yield s
    finally:
        for a in agents:
            a.terminate()
        for a in agents:
            try:
                a.wait(30)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait(10)
        s.stop()
        s.thread.shutdown(wait=True)  # the thread holds the hub namespace while it lives


FAIL_SCRIPT = """
    import os, sys, time
    from pathlib import Path
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    agent = os.environ["DET_AGENT_ID"]
    print(f"rank {rank} on {agent} via {os.environ.get('GLOO_SOCKET_IFNAME')}: "
          f"sum {total.item():g}", flush=True)
    shared = Path(os.environ["SHARED"])
    (shared / f"ready-{rank}").write_text(agent)
    if rank == 1:
        while not (shared / "go").exists():
            time.sleep(0.01)
        (shared / "failed-at").write_text(repr(time.time()))
        os._exit(3)
    time.sleep(300)  # not in a collective: only dettui can end this node
"""


def _node_processes(agent_id: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if (env.get(TEST_MARK) == RUN and "DETTUI_ALLOCATION_ID" in env
                    and env.get("DET_AGENT_ID") == agent_id):
                out.append(proc)
    return out


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def _ddp_across_hosts(s: NetnsServed, h: Hosts) -> None:
    agents = {a["id"]: a for a in s.api("GET", "/api/v1/agents")["agents"]}
    for role in NODES:
        assert agents[role]["addresses"] == [h.address(role)], agents[role]
    exp = run_ddp(s)
    logs = s.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs
    assert "rank 0 of 2 done" in logs and "rank 1 of 2 done" in logs
    check_shards(s, exp["id"])


def _failure_ends_the_other_node(s: NetnsServed, h: Hosts, tmp_path: Path) -> float:
    # in the master's checkpoint storage: the trials (unprivileged users, in mount namespaces
    # of their own) reach it, as they reach no other directory of the test's 0700 tmp dir
    shared = s.state_dir / "checkpoints" / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cfg, ctx = write_ctx(tmp_path, f"""
        name: netns-fail
        entrypoint: python3 -m dettui.launch.torch_distributed python3 fail.py
        resources: {{slots_per_trial: 2}}
        searcher: {{name: single, metric: x, max_length: 1}}
        max_restarts: 0
        environment: {{environment_variables: [SHARED={shared}]}}
        """, {"fail.py": FAIL_SCRIPT})
    out = s.cli("e", "create", str(cfg), str(ctx)).stdout
    exp_id = int(out.split("Created experiment ")[1].split()[0])

    def logs() -> str:
        trials = s.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"]
        return s.cli("t", "logs", str(trials[0]["id"])).stdout if trials else "no trial yet"

    def with_logs(name: str) -> Callable[[], str]:
        return lambda: f"{name}; the trial's logs:\n{logs()}"

    for rank in (0, 1):
        until((shared / f"ready-{rank}").exists, with_logs(f"ready-{rank}"), timeout=120,
              most=0.02)
    failing = (shared / "ready-1").read_text()
    survivor = (shared / "ready-0").read_text()
    assert {failing, survivor} == set(NODES), "one rank on each node"
    node = _node_processes(survivor)
    assert len(node) >= 3, "launcher, torchrun and the worker of the surviving node"
    (shared / "go").touch()
    until((shared / "failed-at").exists, with_logs("failed-at"), timeout=30, most=0.02)
    deadline = time.monotonic() + 60
    while _alive(node):
        assert time.monotonic() < deadline, f"{survivor} still runs: {_alive(node)}"
        time.sleep(0.005)
    ended = time.time()
    failed_at = float((shared / "failed-at").read_text())

    exp = s.wait_experiment(exp_id, timeout=60)
    text = logs()
    assert exp["state"] == "STATE_ERROR", text
    for role in NODES:  # each node's launcher chose the interface that reaches the chief
        rank = 1 if role == failing else 0
        assert f"rank {rank} on {role} via {h.interface(role)}: sum 3" in text, text
    assert "rank 1 exited with 3" in text
    return ended - failed_at


def test_a_ddp_trial_across_two_hosts_and_a_failing_node(tmp_path: Path) -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    t0 = time.monotonic()
    with hosts() as h:
        tag = h.tag
        with cluster(h, tmp_path) as s:
            t1 = time.monotonic()
            _ddp_across_hosts(s, h)
            t2 = time.monotonic()
            latency = _failure_ends_the_other_node(s, h, tmp_path)
            print(f"phases: cluster up {t1 - t0:.1f} s, DDP trial {t2 - t1:.1f} s, "
                  f"failing trial {time.monotonic() - t2:.1f} s")
            print(f"the other node ended {latency:.3f} s after the failing worker's exit")
            # Issue 14's bound (measured 0.26 s on 2 loaded cores; the launcher's own teardown
            # is ~0.04 s, the rest is the exit report and the kill's long-poll).
            assert latency < 1.0, latency
        assert _marked_processes() == []
    assert _ours(tag) == [], "no network namespace of this test is left behind"
