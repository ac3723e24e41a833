"""A separate `dettui agent` process: registration, slots, pools, and stopping it mid-trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_single import _marked_processes, write_ctx

pytestmark = pytest.mark.slow


def start_agent(s: Served, tmp_path: Path, *args: str, token: str | None = None,
                env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A `dettui agent` with a credential of its own (issued by the admin, unless `token`:
    an agent id is bound to the first credential that registers under it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dettui.cli", "-m", s.url, "agent", "--work-dir",
         str(tmp_path / "agent-work"), *args],
        env={**s.env(), "DETTUI_AGENT_TOKEN": token or s.agent_token(), **(env_extra or {})},
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "agent.log", "a"),  # noqa: SIM115
        text=True)


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_agent_joins_with_its_slots_and_runs_work(headless: Served, tmp_path: Path) -> None:
    agent = start_agent(headless, tmp_path, "--slots", "3", "--id", "worker-1")
    try:
        headless.wait_for_agents(1)
        agents = json.loads(headless.cli("agent", "list", "--json").stdout)
        assert [a["id"] for a in agents] == ["worker-1"]
        assert len(agents[0]["slots"]) == 3
        assert {s["device"]["type"] for s in agents[0]["slots"].values()} == {"TYPE_CPU"}
        assert "no NVIDIA GPU found" in (tmp_path / "agent.log").read_text()
        table = headless.cli("agent", "list").stdout
        assert "worker-1" in table
        cfg, ctx = write_ctx(tmp_path, """
            name: env-check
            entrypoint: python3 env.py
            searcher: {name: single, metric: x, max_length: 1}
            environment: {environment_variables: [GREETING=hello]}
            """, {"env.py": """
            import json, os
            keys = ["DET_MASTER", "DET_AGENT_ID", "DET_SLOT_IDS", "DET_TRIAL_ID",
                    "DET_ALLOCATION_ID", "DET_TASK_ID", "DET_SESSION_TOKEN", "DET_HPARAMS",
                    "DET_EXPERIMENT_CONFIG", "DET_TRIAL_RUN_ID", "CUDA_VISIBLE_DEVICES",
                    "GREETING", "DET_CLUSTER_ID", "DET_USER", "DET_TRIAL_SEED"]
            missing = [k for k in keys if k not in os.environ]
            print("missing", missing)
            print("agent", os.environ["DET_AGENT_ID"], "greeting", os.environ["GREETING"])
            print("cwd-has-script", os.path.exists("env.py"))
            """})
        res = headless.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120)
        assert "missing []" in res.stdout
        assert "agent worker-1 greeting hello" in res.stdout
        assert "cwd-has-script True" in res.stdout
    finally:
        agent.terminate()
        agent.wait(30)


@pytest.mark.both_ways  # forked and fresh (conftest)
def test_stopping_an_agent_ends_its_allocations_and_the_trial_resumes(
    headless: Served, tmp_path: Path
) -> None:
    token = headless.agent_token()
    agent = start_agent(headless, tmp_path, "--id", "w", token=token)
    headless.wait_for_agents(1)
    cfg, ctx = write_ctx(tmp_path, """
        name: long
        entrypoint: python3 run.py
        searcher: {name: single, metric: x, max_length: 1}
        max_restarts: 0
        """, {"run.py": """
        import os, subprocess, time
        run = int(os.environ["DET_TRIAL_RUN_ID"])
        print("run", run, flush=True)
        if run == 1:
            subprocess.Popen(["setsid", "sleep", "600"])
            time.sleep(600)
        """})
    headless.cli("e", "create", str(cfg), str(ctx))
    deadline = time.monotonic() + 60
    while "run 1" not in headless.cli("t", "logs", "1").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(0.5)
    assert _marked_processes()
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(30) == 0
    assert _marked_processes() == [], "the agent's stop ended every process of its allocations"
    trial = headless.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["state"] == "STATE_QUEUED" and trial["restarts"] == 0
    agent = start_agent(headless, tmp_path, "--id", "w", token=token)  # the same agent again
    try:
        exp = headless.wait_experiment(1, timeout=60)
        assert exp["state"] == "STATE_COMPLETED"
        assert "run 2" in headless.cli("t", "logs", "1").stdout
    finally:
        agent.terminate()
        agent.wait(30)


def test_user_login_and_job_list(headless: Served) -> None:
    out = headless.cli("user", "login", "admin", "--password", "").stdout
    assert "Logged in as admin" in out
    bad = headless.cli("user", "login", "admin", "--password", "wrong", check=False)
    assert bad.returncode == 1 and "invalid credentials" in bad.stderr
    no_input = subprocess.run([sys.executable, "-m", "dettui.cli", "-m", headless.url, "user",
                               "login", "admin"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, env=headless.env(), timeout=60)
    assert no_input.returncode == 1 and "--password" in no_input.stderr, no_input.stderr
    assert "Traceback" not in no_input.stderr
    jobs = headless.cli("job", "list").stdout
    assert "Job queue: default" in jobs
    assert os.path.exists(headless.config_dir / "auth.json")


def test_disabled_agent_takes_no_new_work(headless: Served, tmp_path: Path) -> None:
    agent = start_agent(headless, tmp_path, "--id", "w1", "--slots", "2")
    try:
        headless.wait_for_agents(1)
        refused = headless.cli("agent", "disable", "w1", check=False)
        assert refused.returncode == 1 and "only an admin may do this" in refused.stderr
        headless.cli("-u", "admin", "agent", "disable", "w1")
        cfg, ctx = write_ctx(tmp_path, """
            name: waits
            entrypoint: python3 -c 'print("ran")'
            searcher: {name: single, metric: x, max_length: 1}
            """, {"x.py": ""})
        headless.cli("e", "create", str(cfg), str(ctx))
        time.sleep(2)
        assert headless.api("GET", "/api/v1/trials/1")["trial"]["state"] == "STATE_QUEUED"
        agents = json.loads(headless.cli("agent", "list", "--json").stdout)
        assert agents[0]["enabled"] is False
        headless.cli("-u", "admin", "agent", "enable", "w1")
        assert headless.wait_experiment(1, timeout=60)["state"] == "STATE_COMPLETED"
    finally:
        agent.terminate()
        agent.wait(30)


def test_agents_join_with_a_credential_an_admin_issued(headless: Served,
                                                       tmp_path: Path) -> None:
    no_token = subprocess.run(
        [sys.executable, "-m", "dettui.cli", "-m", headless.url, "agent", "--id", "x"],
        env={k: v for k, v in headless.env().items() if k != "DETTUI_AGENT_TOKEN"},
        capture_output=True, text=True, timeout=60)
    assert no_token.returncode == 1 and "dettui agent token create" in no_token.stderr
    refused = headless.cli("agent", "token", "create", check=False)
    assert refused.returncode == 1 and "only an admin" in refused.stderr
    made = headless.cli("-u", "admin", "agent", "token", "create", "--description", "gpu box")
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("dettui-agent-")
    agent = subprocess.Popen(
        [sys.executable, "-m", "dettui.cli", "-m", headless.url, "agent", "--work-dir",
         str(tmp_path / "w"), "--id", "gpu-box"], env={**headless.env(),
                                                       "DETTUI_AGENT_TOKEN": secret},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        headless.wait_for_agents(1)
        listed = headless.cli("-u", "admin", "agent", "token", "list").stdout
        assert "gpu-box" in listed and "gpu box" in listed
        cred = json.loads(headless.cli("-u", "admin", "agent", "token", "list", "--json")
                          .stdout)[0]["id"]
        headless.cli("-u", "admin", "agent", "token", "revoke", str(cred))
        made = headless.cli("-u", "admin", "user", "create", "bob", "--password", "Secret-123")
        assert "Created user bob" in made.stdout
        assert "bob" in headless.cli("user", "list").stdout
    finally:
        agent.terminate()
        agent.wait(30)
