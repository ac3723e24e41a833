"""Distributed trials end to end: 2 gloo workers on one agent and across two agents, rank
logs, sharded checkpoints, and a failing worker that ends everything and resumes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served
from tests.e2e.test_agent import start_agent
from tests.e2e.test_single import _marked_processes

pytestmark = pytest.mark.slow


def run_ddp(s: Served, *overrides: str) -> dict:
    args = ["e", "create", str(SAMPLE / "ddp.yaml"), str(SAMPLE)]
    for o in overrides:
        args += ["--config", o]
    out = s.cli(*args).stdout
    exp_id = int(out.split("Created experiment ")[1].split()[0])
    return s.wait_experiment(exp_id, timeout=240)


def check_shards(s: Served, exp_id: int) -> None:
    ckpts = s.api("GET", f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    latest = max(ckpts, key=lambda c: c["metadata"]["steps_completed"])
    assert latest["metadata"] == {"steps_completed": 60, "rank_0": "ok", "rank_1": "ok"}
    files = set(latest["resources"])
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "metadata.json"} <= files
    on_disk = s.state_dir / "checkpoints" / latest["uuid"]
    assert json.loads((on_disk / "metadata.json").read_text())["rank_1"] == "ok"


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_two_workers_on_one_agent(served: Served) -> None:
    exp = run_ddp(served)
    assert exp["state"] == "STATE_COMPLETED"
    logs = served.cli("t", "logs", "1").stdout
    assert "[rank=0] ||" in logs and "[rank=1] ||" in logs
    assert "rank 1 of 2 done after 60 steps" in logs
    only1 = served.cli("t", "logs", "1", "--rank", "1").stdout
    assert "rank 1 of 2 done" in only1 and "[rank=0]" not in only1
    check_shards(served, 1)


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_a_failing_worker_ends_the_trial_which_resumes_from_its_shards(served: Served) -> None:
    exp = run_ddp(served, "hyperparameters.fail_rank=1", "hyperparameters.fail_at=30")
    assert exp["state"] == "STATE_COMPLETED"
    trial = served.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["restarts"] == 1 and len(trial["allocationIds"]) == 2
    logs = served.cli("t", "logs", "1").stdout
    assert "rank 1 fails on purpose at step 30" in logs
    assert "resumed from checkpoint" in logs and "at step 20" in logs
    assert "rank 1 exited with 3" in logs
    assert _marked_processes() == []
    check_shards(served, 1)


@pytest.fixture
def two_agents(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--no-agent"])
    s.start()
    for name in ("node-a", "node-b"):
        (tmp_path / name).mkdir()
    agents = [start_agent(s, tmp_path / name, "--id", name, "--slots", "1",
                          "--address", "127.0.0.1") for name in ("node-a", "node-b")]
    try:
        s.wait_for_agents(2)
        yield s
    finally:
        for a in agents:
            a.terminate()
            a.wait(30)
        s.stop()


def test_the_same_trial_across_two_agents(two_agents: Served) -> None:
    exp = run_ddp(two_agents)
    assert exp["state"] == "STATE_COMPLETED", two_agents.cli("t", "logs", "1").stdout
    tasks_seen = two_agents.cli("t", "logs", "1").stdout
    assert "rank 0 of 2 done" in tasks_seen and "rank 1 of 2 done" in tasks_seen
    check_shards(two_agents, 1)


def test_a_failing_node_ends_the_other_node(two_agents: Served) -> None:
    exp = run_ddp(two_agents, "hyperparameters.fail_rank=1", "max_restarts=0")
    assert exp["state"] == "STATE_ERROR"
    # Each agent ships its lines before its exit report, but the trial may end before the
    # failing node's report arrives (its agent counted as gone on a loaded machine, or its
    # shipping past SHIP_GRACE): its last lines then follow from its spool. Seen once with
    # two suites at once on 2 cores.
    deadline = time.monotonic() + 60
    while "rank 1 fails on purpose" not in (logs := two_agents.cli("t", "logs", "1").stdout):
        assert time.monotonic() < deadline, logs
        time.sleep(0.5)
    assert "rank 0 of 2 done" not in logs
    assert _marked_processes() == []


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_sigkill_of_the_agent_leaves_no_worker_and_the_trial_resumes(
        headless: Served, tmp_path: Path) -> None:
    token = headless.agent_token()
    agent = start_agent(headless, tmp_path, "--id", "box", "--slots", "2", token=token)
    headless.wait_for_agents(1)
    out = headless.cli("e", "create", str(SAMPLE / "ddp.yaml"), str(SAMPLE), "--config",
                       "hyperparameters.step_sleep=0.1").stdout
    exp_id = int(out.split("Created experiment ")[1].split()[0])
    deadline = time.monotonic() + 60
    while "sharded checkpoint" not in headless.cli("t", "logs", "1").stdout:
        assert time.monotonic() < deadline, headless.cli("t", "logs", "1").stdout
        time.sleep(0.2)
    assert len(_marked_processes()) >= 4, "launcher, torchrun and two workers"
    agent.kill()
    agent.wait(10)
    deadline = time.monotonic() + 15
    while _marked_processes():
        assert time.monotonic() < deadline, f"left behind: {_marked_processes()}"
        time.sleep(0.1)
    agent = start_agent(headless, tmp_path, "--id", "box", "--slots", "2", token=token)
    try:
        exp = headless.wait_experiment(exp_id, timeout=180)
        logs = headless.cli("t", "logs", "1").stdout
        assert exp["state"] == "STATE_COMPLETED", logs
        assert "resumed from checkpoint" in logs
    finally:
        agent.terminate()
        agent.wait(30)


def test_dry_run_prints_each_node_and_creates_nothing(headless: Served, tmp_path: Path) -> None:
    for name in ("node-a", "node-b"):
        (tmp_path / name).mkdir()
    agents = [start_agent(headless, tmp_path / name, "--id", name, "--slots", "1")
              for name in ("node-a", "node-b")]
    try:
        headless.wait_for_agents(2)
        out = headless.cli("e", "create", str(SAMPLE / "ddp.yaml"), str(SAMPLE),
                           "--dry-run").stdout
        assert "node 0: agent node-a, slots [0]" in out
        assert "node 1: agent node-b, slots [0]" in out
        assert "--nnodes 2" in out and "--node_rank 1" in out and "nothing was created" in out
        assert headless.api("GET", "/api/v1/experiments")["experiments"] == []
        bad = headless.cli("e", "create", str(SAMPLE / "ddp.yaml"), str(SAMPLE), "--dry-run",
                           "--config", "resources.slots_per_trial=0.5", check=False)
        assert bad.returncode != 0 and "slots_per_trial" in bad.stderr
    finally:
        for a in agents:
            a.terminate()
            a.wait(30)
