"""The real determined==0.38.1 `det` CLI against `dettui serve` (installed by `make test`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served

pytestmark = pytest.mark.slow

DET_VENV = os.environ.get("DETTUI_DET_VENV")


def det(served: Served, home: Path, *args: str, stdin: str = "",
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert DET_VENV, "make test sets DETTUI_DET_VENV to the venv holding determined==0.38.1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DETTUI_"))}
    env.update({"HOME": str(home), "DET_MASTER": served.url, "XDG_CONFIG_HOME": str(home)})
    return subprocess.run([str(Path(DET_VENV) / "bin" / "det"), "-m", served.url, *args],
                          input=stdin, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
@pytest.mark.expect_404(r"GET /api/v1/experiments/1")  # `det e delete` waits for it; describe
def test_real_det_cli_runs_an_experiment(served: Served, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    login = det(served, home, "user", "login", "determined", stdin="\n")
    assert login.returncode == 0, login.stdout + login.stderr
    created = det(served, home, "e", "create", "--paused", str(SAMPLE / "single.yaml"),
                  str(SAMPLE))
    assert created.returncode == 0, created.stdout + created.stderr
    assert "Created experiment 1" in created.stdout
    listed = det(served, home, "e", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert " 1 " in listed.stdout or "| 1" in listed.stdout
    jobs = det(served, home, "job", "list")  # as Determined: a paused job requests nothing
    assert jobs.returncode == 0, jobs.stdout + jobs.stderr
    assert "TYPE_EXPERIMENT" not in jobs.stdout, jobs.stdout
    users = det(served, home, "user", "list")
    assert users.returncode == 0 and "admin" in users.stdout, users.stdout + users.stderr
    for what in ("agent", "slot"):  # agents carry telemetry and slotStats for det
        listed = det(served, home, what, "list")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert "default" in listed.stdout, listed.stdout
    activated = det(served, home, "e", "activate", "1")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    jobs = det(served, home, "job", "list")
    assert "TYPE_EXPERIMENT" in jobs.stdout or served.api(
        "GET", "/api/v1/experiments/1")["experiment"]["state"] == "STATE_COMPLETED", jobs.stdout
    exp = served.wait_experiment(1, timeout=300)
    assert exp["state"] == "STATE_COMPLETED"
    listed = det(served, home, "e", "list")
    assert "COMPLETED" in listed.stdout
    # describe reads the trial's workloads: one row per step with its validation metric.
    described = det(served, home, "e", "describe", "1", "--metrics")
    assert described.returncode == 0, described.stdout + described.stderr
    assert "Workloads:" in described.stdout and "Validation Metric: validation_loss" in \
        described.stdout, described.stdout
    trial = det(served, home, "trial", "describe", "1", "--metrics")
    assert trial.returncode == 0, trial.stdout + trial.stderr
    assert "COMPLETED" in trial.stdout, trial.stdout
    deleted = det(served, home, "e", "delete", "1", "--yes")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert det(served, home, "e", "describe", "1").returncode != 0, "experiment 1 is gone"


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_real_det_cli_queue_and_experiment_settings(served: Served, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert det(served, home, "user", "login", "determined", stdin="\n").returncode == 0
    for _ in range(2):
        res = det(served, home, "e", "create", "--paused", str(SAMPLE / "single.yaml"),
                  str(SAMPLE))
        assert res.returncode == 0, res.stdout + res.stderr
    # paused experiments are not in Determined's job queue; their jobs can still be changed
    assert served.api("GET", "/api/v1/job-queues-v2")["jobs"] == []
    j1, j2 = (served.api("GET", f"/api/v1/experiments/{i}")["experiment"]["jobId"]
              for i in (1, 2))
    res = det(served, home, "job", "update", j2, "--priority", "7")
    assert res.returncode == 0, res.stdout + res.stderr
    res = det(served, home, "job", "update-batch", f"{j1}.priority=3", f"{j2}.priority=5")
    assert res.returncode == 0, res.stdout + res.stderr
    prios = [served.api("GET", f"/api/v1/experiments/{i}")["experiment"]["config"][
        "resources"]["priority"] for i in (1, 2)]
    assert prios == [3, 5]
    res = det(served, home, "e", "set", "priority", "2", "9")
    assert res.returncode == 0, res.stdout + res.stderr
    assert served.api("GET", "/api/v1/experiments/2")["experiment"]["config"]["resources"][
        "priority"] == 9
    assert det(served, home, "e", "activate", "2").returncode == 0
    listed = det(served, home, "job", "list")
    rows = [r.split("|") for r in listed.stdout.splitlines() if "TYPE_EXPERIMENT" in r]
    assert listed.returncode == 0 and (any(r[4].strip() == "9" for r in rows) or served.api(
        "GET", "/api/v1/experiments/2")["experiment"]["state"] == "STATE_COMPLETED"), listed.stdout
    assert det(served, home, "e", "activate", "1").returncode == 0
    served.wait_experiment(1, timeout=300)
    res = det(served, home, "e", "set", "gc-policy", "1", "--save-experiment-best", "0",
              "--save-trial-best", "0", "--save-trial-latest", "0", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    ckpts = served.api("GET", "/api/v1/experiments/1/checkpoints")["checkpoints"]
    assert ckpts and {c["state"] for c in ckpts} == {"STATE_DELETED"}
    preview = det(served, home, "e", "set", "gc-policy", "1", "--save-experiment-best", "1",
                  "--save-trial-best", "1", "--save-trial-latest", "1", stdin="n\n")
    assert "Traceback" not in preview.stderr, preview.stderr


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_real_det_cli_manages_users(served: Served, tmp_path: Path) -> None:
    """`det user create|deactivate|activate|change-password` as an admin; the new user logs in
    and changes their own password; a deactivated user cannot log in."""
    home = tmp_path / "home"
    home.mkdir()
    assert det(served, home, "user", "login", "admin", stdin="\n").returncode == 0
    made = det(served, home, "user", "create", "alice", "--password", "Secret-123")
    assert made.returncode == 0, made.stdout + made.stderr
    assert "alice" in det(served, home, "user", "list").stdout
    changed = det(served, home, "user", "change-password", "alice",
                  stdin="Other-456\nOther-456\n")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    alice = tmp_path / "alice"
    alice.mkdir()
    logged = det(served, alice, "user", "login", "alice", stdin="Other-456\n")
    assert logged.returncode == 0, logged.stdout + logged.stderr
    refused = det(served, alice, "user", "create", "bob", "--password", "Secret-123")
    assert refused.returncode != 0 and "admin" in (refused.stdout + refused.stderr).lower()
    off = det(served, home, "user", "deactivate", "alice")
    assert off.returncode == 0, off.stdout + off.stderr
    again = det(served, alice, "user", "login", "alice", stdin="Other-456\n")
    assert again.returncode != 0
    on = det(served, home, "user", "activate", "alice")
    assert on.returncode == 0, on.stdout + on.stderr
    assert det(served, alice, "user", "login", "alice", stdin="Other-456\n").returncode == 0


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_real_det_cli_links_users_with_agent_users(served: Served, tmp_path: Path) -> None:
    """`det user link-with-agent-user` as an admin stores the link: `det user list` shows it,
    and the master's user object carries it; an ordinary user is refused."""
    home = tmp_path / "home"
    home.mkdir()
    assert det(served, home, "user", "login", "admin", stdin="\n").returncode == 0
    made = det(served, home, "user", "create", "alice", "--password", "Secret-123")
    assert made.returncode == 0, made.stdout + made.stderr
    linked = det(served, home, "user", "link-with-agent-user", "alice", "--agent-uid", "1001",
                 "--agent-gid", "1002", "--agent-user", "alice", "--agent-group", "lab")
    assert linked.returncode == 0, linked.stdout + linked.stderr
    listed = det(served, home, "user", "list")
    row = next(line for line in listed.stdout.splitlines() if " alice " in f" {line} ")
    assert all(v in row for v in ("1001", "1002", "lab")), listed.stdout
    got = served.api("GET", "/api/v1/users/alice/by-username")["user"]["agentUserGroup"]
    assert got == {"agentUid": 1001, "agentGid": 1002, "agentUser": "alice",
                   "agentGroup": "lab"}
    alice = tmp_path / "alice"
    alice.mkdir()
    assert det(served, alice, "user", "login", "alice", stdin="Secret-123\n").returncode == 0
    refused = det(served, alice, "user", "link-with-agent-user", "alice", "--agent-uid", "0",
                  "--agent-gid", "0", "--agent-user", "root", "--agent-group", "root")
    assert refused.returncode != 0, refused.stdout
    again = served.api("GET", "/api/v1/users/alice/by-username")["user"]["agentUserGroup"]
    assert again == got
