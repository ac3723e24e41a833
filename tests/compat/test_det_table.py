"""Every `det` command of issue 11's list, run by the real determined==0.38.1 CLI against one
`dettui serve`, row by row: the command, what its output must hold, whether it succeeds.
Rows run in order; some set up what later rows read (a running trial, a drained agent)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

TRAIN = """
import logging
from determined import core
logging.basicConfig(level=logging.INFO)
with core.init() as ctx:
    for step in (1, 2):
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        ctx.train.report_validation_metrics(steps_completed=step, metrics={"val": 3 - step})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            (path / "w").write_text(str(step))
    logging.info("trained to step 2")
"""
SLEEP = """
import time
from determined import core
with core.init() as ctx:
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
    print("sleeping", flush=True)
    while True:
        time.sleep(0.2)
"""
NOT_SUPPORTED = [
    (["model", "list"], "the model registry is not supported by dettui"),
    (["project", "list", "1"], "workspaces and projects are not supported by dettui"),
    (["notebook", "list"], "notebooks are not supported by dettui"),
    (["shell", "list"], "shells are not supported by dettui"),
    (["cmd", "list"], "commands are not supported by dettui"),
    (["tensorboard", "list"], "TensorBoard instances are not supported by dettui"),
    # det checks rbacEnabled (GET /api/v1/master, no sign-in) before calling these routes
    (["user-group", "list"], "User groups commands require the Determined Enterprise"),
    (["rbac", "my-permissions"], "RBAC commands require the Determined Enterprise Edition"),
]


class Run:
    def __init__(self, served: Served, tmp: Path) -> None:
        self.served, self.home = served, tmp / "home"
        self.home.mkdir()
        self.user = tmp / "admin-home"
        self.user.mkdir()
        assert det(served, self.home, "user", "login", "determined", stdin="\n").returncode == 0
        assert det(served, self.user, "user", "login", "admin", stdin="\n").returncode == 0

    def det(self, *args: str, admin: bool = False) -> tuple[int, str]:
        res = det(self.served, self.user if admin else self.home, *args)
        return res.returncode, res.stdout + res.stderr

    def trial(self, tid: int) -> dict:
        return self.served.api("GET", f"/api/v1/trials/{tid}")["trial"]


def container_of(served: Served, trial_id: int, text: str) -> str:
    """The containerId of the trial's log line holding `text` (read through the API)."""
    req = urllib.request.Request(f"{served.url}/api/v1/trials/{trial_id}/logs",
                                 headers={"Authorization": f"Bearer {served.token()}"})
    lines = [json.loads(line)["result"] for line in served.urlopen(req, 30).splitlines()]
    return str(next(line["containerId"] for line in lines if text in line["message"]))


def job_state(out: str, name: str) -> str | None:
    """The State column of `det job list`'s row for the job named `name`."""
    row = next((r for r in out.splitlines() if name in r), "")
    found = re.search(r"\bSTATE_[A-Z_]+\b", row)
    return found.group(0) if found else None


def step(run: Run, args: list[str], want: str | Callable[[str], bool], ok: bool = True,
         admin: bool = False) -> str:
    code, out = run.det(*args, admin=admin)
    assert (code == 0) == ok, f"det {' '.join(args)} exited {code}:\n{out}"
    good = want(out) if callable(want) else want in out
    assert good, f"det {' '.join(args)}: expected {want!r} in:\n{out}"
    return out


def test_every_det_command_of_the_issue(served: Served, tmp_path: Path) -> None:
    run = Run(served, tmp_path)
    agent = served.api("GET", "/api/v1/agents")["agents"][0]["id"]
    (tmp_path / "a").mkdir()
    cfg, ctx = write_ctx(tmp_path / "a", """
        name: table
        entrypoint: python3 train.py
        searcher: {name: single, metric: val, max_length: 2}
        checkpoint_storage: {save_trial_best: 3, save_trial_latest: 3}
        """, {"train.py": TRAIN})
    # a partial checkpoint_storage takes the master's place; --test runs a test experiment
    step(run, ["e", "create", "--test", str(cfg), str(ctx)], "Model definition test succeeded")
    step(run, ["e", "create", "--template", "nonexist", str(cfg), str(ctx)],
         "config templates are not supported by dettui (--template 'nonexist')", ok=False)
    step(run, ["e", "create", str(cfg), str(ctx)], "Created experiment 2")
    assert served.wait_experiment(2)["state"] == "STATE_COMPLETED"
    exp = served.api("GET", "/api/v1/experiments/2")["experiment"]
    assert exp["checkpointCount"] == 2 and int(exp["checkpointSize"]) > 0, exp
    assert exp["bestTrialId"] == 2 and exp["trialIds"] == [2] and exp["duration"] >= 0, exp
    step(run, ["e", "list-checkpoints", "2"],
         lambda out: re.search(r"\|\s+2\s+\|\s+COMPLETED\s+\|\s+1\s+\|", out) is not None)
    step(run, ["trial", "describe", "2"], lambda out: '"avg_metrics"' in out
         and '"validation_metrics"' in out and '"count": 2' in out)
    task_id = run.trial(2)["taskId"]
    step(run, ["task", "logs", task_id], "trained to step 2")
    step(run, ["trial", "logs", "2", "--level", "INFO"], "trained to step 2")
    step(run, ["trial", "logs", "2", "--level", "ERROR"], lambda out: "trained to" not in out)
    step(run, ["trial", "logs", "2", "--agent-id", "no-such-agent"],
         lambda out: "trained to" not in out)
    step(run, ["trial", "logs", "2", "--agent-id", agent], "trained to step 2")
    cid = container_of(served, 2, "trained to step 2")
    step(run, ["trial", "logs", "2", "--container-id", cid], "trained to step 2")
    step(run, ["trial", "logs", "2", "--container-id", "no-such-container"],
         lambda out: "trained to" not in out)
    step(run, ["e", "continue", "2", "--config", "searcher.max_length=3"],
         "Continued experiment 2")
    assert served.wait_experiment(2)["state"] == "STATE_COMPLETED"
    assert run.trial(2)["restarts"] == 0

    (tmp_path / "b").mkdir()
    cfg, ctx = write_ctx(tmp_path / "b", """
        name: sleeper
        entrypoint: python3 sleep.py
        searcher: {name: single, metric: loss}
        """, {"sleep.py": SLEEP})
    step(run, ["e", "create", "--paused", str(cfg), str(ctx)], "Created experiment 3")
    step(run, ["job", "list"], lambda out: "TYPE_EXPERIMENT" not in out)  # paused: no request
    step(run, ["e", "activate", "3"], "")
    until(lambda: run.trial(3)["state"] == "STATE_RUNNING", "the sleeper", timeout=120)
    container = served.api("GET", "/api/v1/tasks")["allocationIdToSummary"]
    alloc = next(iter(container))
    step(run, ["task", "list"], lambda out: bool(re.search(
        rf"{re.escape(alloc)}\s+\|\s+Trial 3\s+\|\s+1\s+\|[^|]+\|\s+{agent}\s+\|\s+42\s+\|"
        r"\s+default", out)))
    step(run, ["slot", "list"], lambda out: alloc in out and "Trial 3" in out)
    step(run, ["job", "list"], lambda out: "STATE_SCHEDULED " in out or "STATE_SCHEDULED\n"
         in out or "STATE_SCHEDULED |" in out)
    # a more urgent job that does not fit queues behind the running one, which stays
    # SCHEDULED: Determined says SCHEDULED_BACKFILLED only of what backfilling started
    (tmp_path / "c").mkdir()
    cfg, ctx = write_ctx(tmp_path / "c", """
        name: urgent
        entrypoint: python3 sleep.py
        searcher: {name: single, metric: loss}
        resources: {slots_per_trial: 2, priority: 10}
        """, {"sleep.py": SLEEP})
    step(run, ["e", "create", str(cfg), str(ctx)], "Created experiment 4")
    step(run, ["job", "list"], lambda out: job_state(out, "sleeper (3)") == "STATE_SCHEDULED"
         and job_state(out, "urgent (4)") == "STATE_QUEUED")
    step(run, ["e", "kill", "4"], "")
    assert served.wait_experiment(4)["state"] == "STATE_CANCELED"
    step(run, ["slot", "disable", agent, "1"], f"Disabled slot 1 of agent {agent}", admin=True)
    step(run, ["slot", "list"], lambda out: bool(re.search(
        rf"{agent}\s+\|\s+default\s+\|\s+1\s+\|\s+False", out)))
    step(run, ["slot", "enable", agent, "1"], f"Enabled slot 1 of agent {agent}", admin=True)
    step(run, ["agent", "disable", agent, "--drain"], "Tasks still in progress", admin=True)
    step(run, ["agent", "list"], lambda out: bool(re.search(r"\|\s+False\s+\|\s+True\s+\|",
                                                             out)))
    assert run.trial(3)["state"] == "STATE_RUNNING"  # draining lets it run
    step(run, ["agent", "disable", agent], f"Disabled agent {agent}", admin=True)
    until(lambda: run.trial(3)["state"] == "STATE_QUEUED", "the trial killed off the agent",
          timeout=120)
    assert run.trial(3)["restarts"] == 0  # not the trial's fault
    step(run, ["agent", "enable", agent], f"Enabled agent {agent}", admin=True)
    until(lambda: run.trial(3)["state"] == "STATE_RUNNING", "the sleeper again", timeout=120)
    step(run, ["trial", "kill", "3"], "Killed trial 3")
    until(lambda: run.trial(3)["state"] == "STATE_CANCELED", "the killed trial", timeout=120)
    time.sleep(0.5)
    assert served.api("GET", "/api/v1/tasks")["allocationIdToSummary"] == {}

    for args, sentence in NOT_SUPPORTED:
        step(run, args, sentence, ok=False)
