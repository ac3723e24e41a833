"""Trials get only what they need, and nothing of an allocation outlives it: no agent secret in a
trial's environment, the master's database out of its reach, every process gone within a second
of an agent SIGKILL (PID namespace), and a SIGSTOPped agent ending its old copies at once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dettui.agent import sandbox
from tests.conftest import RUN, Served, marked_processes
from tests.e2e.test_agent import start_agent
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = pytest.mark.slow
NAMESPACES = sandbox.probe().on

SLEEPER = """
import os, sys, time
if os.fork() == 0:            # a daemon: double fork, its own session, marked in its environ
    os.setsid()
    if os.fork() == 0:
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"],
                  {**os.environ, "SLEEPER_DAEMON": "1"})
    os._exit(0)
print("ready", os.environ["DET_ALLOCATION_ID"], flush=True)
time.sleep(600)
"""


def allocation_processes(daemons: bool = False) -> dict[str, list[int]]:
    """This test run's live allocation processes, by allocation id (only SLEEPER's daemons
    with `daemons`)."""
    out: dict[str, list[int]] = {}
    for pid in marked_processes():
        try:
            env = psutil.Process(pid).environ()
            alloc = env["DETTUI_ALLOCATION_ID"]
        except (psutil.Error, KeyError):
            continue
        if not daemons or "SLEEPER_DAEMON" in env:
            out.setdefault(alloc, []).append(pid)
    return out


@pytest.fixture
def secrets_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("DETTUI_AGENT_TOKEN", "agent-secret-xyz")
    monkeypatch.setenv("MY_CLOUD_TOKEN", "cloud-secret-xyz")
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "1"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_a_trial_sees_no_secret_and_not_the_masters_database(secrets_served: Served,
                                                             tmp_path: Path) -> None:
    state = secrets_served.state_dir.resolve()
    cfg, ctx = write_ctx(tmp_path, f"""
        name: nosy
        entrypoint: python3 nosy.py
        searcher: {{name: single, metric: x, max_length: 1}}
        environment: {{environment_variables: [GREETING=hello, STATE={state}]}}
        """, {"nosy.py": """
        import os
        from dettui import core
        env = dict(os.environ)
        print("secrets", sorted(k for k, v in env.items() if "secret-xyz" in v))
        print("greeting", env.get("GREETING"), "has-det", "DET_TRIAL_ID" in env)
        for path in (env["STATE"] + "/master.db", "../../master.db", "../master.db"):
            try:
                with open(path, "rb") as f:
                    print("READ", path, f.read(6))
            except OSError as exc:
                print("refused", path, type(exc).__name__)
        with core.init() as ctx:
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
                (path / "w.txt").write_text("weights")
        print("checkpointed", uuid)
        """})
    out = secrets_served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120).stdout
    assert "secrets []" in out, out
    assert "greeting hello has-det True" in out
    uuid = out.split("checkpointed ", 1)[1].split()[0]
    assert (state / "checkpoints" / uuid / "w.txt").read_text() == "weights"
    if not NAMESPACES:  # root reads anything without a mount namespace
        pytest.skip(f"the database check needs namespaces: {sandbox.probe().note}")
    assert "READ" not in out and out.count("refused") == 3, out


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_a_standalone_agents_secrets_stay_with_it(headless: Served, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETTUI_ADMIN_PASSWORD", "admin-secret-xyz")
    monkeypatch.setenv("DET_PASS", "det-secret-xyz")
    agent = start_agent(headless, tmp_path, "--slots", "1", "--id", "env-agent")
    try:
        headless.wait_for_agents(1)
        cfg, ctx = write_ctx(tmp_path, """
            name: env
            entrypoint: python3 env.py
            searcher: {name: single, metric: x, max_length: 1}
            """, {"env.py": """
            import os
            print("secrets", sorted(k for k, v in os.environ.items() if "secret-xyz" in v))
            print("mark", os.environ.get("DETTUI_TEST_RUN"))
            """})
        out = headless.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120).stdout
        assert "secrets []" in out, out
        assert f"mark {RUN}" in out
    finally:
        agent.terminate()
        agent.wait(30)


def test_an_agent_refuses_storage_inside_what_trials_must_not_see(headless: Served,
                                                                   tmp_path: Path) -> None:
    """A checkpoint storage inside the agent's work root (other allocations' work and tokens)
    is refused by the agent before anything runs, with the reason in the trial's logs."""
    agent = start_agent(headless, tmp_path, "--slots", "1", "--id", "careful")
    try:
        headless.wait_for_agents(1)
        inside = tmp_path / "agent-work" / "ckpts"
        cfg, ctx = write_ctx(tmp_path, f"""
            name: nosy-storage
            entrypoint: python3 -c "print('ran')"
            searcher: {{name: single, metric: x, max_length: 1}}
            checkpoint_storage: {{type: shared_fs, host_path: {inside}}}
            max_restarts: 0
            """, {})
        out = headless.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120,
                           check=False).stdout
        assert "checkpoint_storage:" in out and "lies inside" in out, out
        assert "ran" not in out.replace("nosy-storage", "")
        state = headless.cli("e", "describe", "1", "--json").stdout
        assert "STATE_ERROR" in state
    finally:
        agent.terminate()
        agent.wait(30)


def _sleeper(s: Served, tmp_path: Path, name: str) -> str:
    """Start a trial that leaves a daemon; the allocation id once both run."""
    (tmp_path / name).mkdir()
    cfg, ctx = write_ctx(tmp_path / name, f"""
        name: {name}
        entrypoint: python3 sleeper.py
        searcher: {{name: single, metric: x, max_length: 1}}
        max_restarts: 5
        """, {"sleeper.py": SLEEPER})
    s.cli("e", "create", str(cfg), str(ctx))
    until(lambda: allocation_processes(daemons=True), "the trial's daemon", timeout=60)
    return next(iter(allocation_processes(daemons=True)))


@pytest.mark.both_ways  # forked and fresh (conftest)
@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_an_agent_sigkill_leaves_no_process(headless: Served, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            namespaces: bool) -> None:
    if namespaces and not NAMESPACES:
        pytest.skip(sandbox.probe().note or "no namespaces")
    if not namespaces:
        monkeypatch.setenv(sandbox.OFF_SWITCH, "1")
    agent = start_agent(headless, tmp_path, "--slots", "1", "--id", "doomed")
    try:
        headless.wait_for_agents(1)
        alloc = _sleeper(headless, tmp_path, "sleeper")
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(10)
        killed = time.monotonic()
        if namespaces:  # the PID namespace ends with its init, which ends with the agent
            until(lambda: alloc not in allocation_processes(), "no process left", timeout=5)
            took = time.monotonic() - killed
            print(f"\nagent SIGKILL -> no process of its allocation: {took * 1000:.0f} ms")
            assert took < 1.0, f"the allocation's processes outlived the agent by {took:.2f} s"
            return
        # without namespaces the daemon survives the agent; the agent's next start sweeps it
        agent = start_agent(headless, tmp_path, "--slots", "1", "--id", "doomed")
        until(lambda: alloc not in allocation_processes(), "the sweep at agent start", timeout=30)
        assert "--no-sandbox: trials run unconfined" in (tmp_path / "agent.log").read_text()
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(30)


@pytest.fixture
def quick(tmp_path: Path) -> Iterator[Served]:
    """A master that declares an agent gone after 3 s of silence."""
    s = Served(tmp_path / "state", tmp_path / "config",
               extra=["--no-agent", "--agent-timeout", "3"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_a_stopped_agent_ends_its_old_copy_at_once(quick: Served, tmp_path: Path) -> None:
    first = start_agent(quick, tmp_path, "--slots", "1", "--id", "first")
    second = None
    try:
        quick.wait_for_agents(1)
        old = _sleeper(quick, tmp_path, "sleeper")
        second = start_agent(quick, tmp_path, "--slots", "1", "--id", "second")
        quick.wait_for_agents(2)
        first.send_signal(signal.SIGSTOP)
        # the master gives the trial to the second agent: two copies run for now
        until(lambda: len(allocation_processes()) == 2, "the copy on the second agent", timeout=30)
        first.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        until(lambda: old not in allocation_processes(), "the old copy gone", timeout=10)
        took = time.monotonic() - resumed
        print(f"\nstopped agent resumed -> its old copy gone: {took * 1000:.0f} ms")
        assert took < 1.0, f"the old copy ran on for {took:.2f} s after the agent resumed"
        assert len(allocation_processes()) == 1
        assert "declared lost" in (tmp_path / "agent.log").read_text()
        second.terminate()
        second.wait(30)
    finally:
        for proc in (first, second):  # a failed test must not leave an agent behind
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                proc.wait(30)
