"""A scripted cluster for crash-point tests: a real master app in-process (restarted on the same
database after every simulated crash), one simulated agent speaking the real agent protocol, and
trials that report metrics and checkpoints through the real Core API routes.

The scenario (`Scenario.run`): an experiment `single` (one trial) and an experiment `grid` (two
trials, one slot each, on an agent of two slots). `single` reports (metrics, progress),
checkpoints, is paused, activated, runs again and completes; `grid`'s first trial completes (a
search step), its second runs and the experiment is cancelled; `doomed` is created paused,
cancelled and deleted. Everything is retried across
crashes, as real clients do, and what the master acknowledged is recorded to check afterwards.
At each restart, before any retry, the committed state is checked against `INVARIANTS`: a
retried request must not be what makes it consistent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from dettui.master.app import create_app
from dettui.master.settings import MasterSettings
from dettui.master.store import tx
from dettui.master.store.db import connect

AGENT = "sim-agent"
CONFIGS = {
    "single": """
name: single
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
max_restarts: 2
""",
    "grid": """
name: grid
entrypoint: python3 train.py
searcher: {name: grid, metric: loss, max_concurrent_trials: 1}
hyperparameters: {x: {type: categorical, vals: [1, 2]}}
max_restarts: 2
""",
}


# Created paused, canceled and deleted (a deletion is two commits with the files between): it
# must be gone at the end, however the master crashed meanwhile.
DOOMED = """
name: doomed
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
"""

STOPPED = "(e.state = 'STATE_PAUSED' OR e.state LIKE 'STATE_STOPPING_%')"
LIVE = "a.state != 'EXITED'"
INVARIANTS = {  # what must hold at every commit: a query for the rows that break it
    "a paused or stopping experiment has a QUEUED trial":
        f"SELECT t.id FROM trials t JOIN experiments e ON e.id = t.experiment_id "
        f"WHERE {STOPPED} AND t.state = 'STATE_QUEUED'",
    "a paused or stopping experiment has a live allocation told neither to preempt nor die":
        f"SELECT a.id FROM allocations a JOIN trials t ON t.id = a.trial_id "
        f"JOIN experiments e ON e.id = t.experiment_id WHERE {STOPPED} AND {LIVE} "
        "AND a.preempt_requested = 0 AND a.kill_requested = 0",
    "a RUNNING trial has no live allocation":
        f"SELECT t.id FROM trials t JOIN experiments e ON e.id = t.experiment_id "
        f"WHERE e.unmanaged = 0 AND t.state = 'STATE_RUNNING' AND NOT EXISTS "
        f"(SELECT 1 FROM allocations a WHERE a.trial_id = t.id AND {LIVE})",
    "a live allocation's trial is neither RUNNING nor being killed":
        f"SELECT a.id FROM allocations a JOIN trials t ON t.id = a.trial_id WHERE {LIVE} "
        "AND t.state NOT IN ('STATE_RUNNING', 'STATE_STOPPING_KILLED')",
    "a trial has two live allocations":
        f"SELECT a.trial_id FROM allocations a WHERE {LIVE} GROUP BY a.trial_id "
        "HAVING COUNT(*) > 1",
    "an ended trial has a live allocation":
        f"SELECT a.id FROM allocations a JOIN trials t ON t.id = a.trial_id WHERE {LIVE} "
        "AND t.state IN ('STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR')",
    # A single-trial search's progress is its trial's while the trial runs (`reports.progress`
    # writes both in one commit; they were two).
    "an experiment being deleted has not ended":
        "SELECT id FROM experiments WHERE deleting = 1 AND state NOT IN "
        "('STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR')",
    "a single search's progress is not its running trial's":
        "SELECT e.id FROM experiments e JOIN trials t ON t.experiment_id = e.id "
        "WHERE e.searcher_type = 'single' AND e.unmanaged = 0 AND t.state NOT IN "
        "('STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR') "
        "AND ABS(COALESCE(e.progress, 0) - COALESCE(t.progress, 0)) > 0.000001",
}


def inconsistencies(target: Path | str) -> list[str]:
    """The invariants the committed state breaks (read in one snapshot), with the rows, in the
    store at `target` (a SQLite file or a PostgreSQL URL)."""
    conn = connect(target)
    try:
        conn.execute("BEGIN")
        found = [f"{rule}: {[r[0] for r in rows]}" for rule, sql in INVARIANTS.items()
                 if (rows := conn.execute(sql).fetchall())]
        conn.execute("ROLLBACK")
        return found
    finally:
        conn.close()


class MasterDown(Exception):
    """The master crashed (simulated) or refused because it is going down."""


@dataclass
class Run:
    """One allocation the simulated agent runs."""

    alloc_id: str
    trial_id: int
    run_id: int
    token: str
    exp: str
    reported: bool = False
    exit_code: int | None = None  # set: the process has exited, the report may be pending


@dataclass
class Scenario:
    tmp: Path
    plan: tx.CrashPlan
    client: TestClient | None = None
    token: str = ""
    exps: dict[str, int] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)  # allocations whose exit was acknowledged
    acked_metrics: set[tuple[int, int, str, int]] = field(default_factory=set)
    acked_checkpoints: set[str] = field(default_factory=set)
    done: dict[str, bool] = field(default_factory=dict)  # milestones of the script
    restarts: int = 0
    agent_token: str = ""
    db_url: str | None = None  # PostgreSQL; None: SQLite in the state dir

    # --- the master -----------------------------------------------------------------------

    @property
    def settings(self) -> MasterSettings:
        return MasterSettings(state_dir=self.tmp / "state", port=0, db_url=self.db_url)

    async def start(self, plan: tx.CrashPlan | None,
                    recovered: Callable[[], None] = lambda: None) -> None:
        app = create_app(self.settings)
        if plan is not None:
            tx.plan_crash_of_next_store(plan)
        self.client = TestClient(TestServer(app))
        try:
            await self.client.start_server()
        except tx.SimulatedCrash as exc:
            raise MasterDown(str(exc)) from exc
        recovered()
        self.token = (await self.call("POST", "/api/v1/auth/login",
                                      {"username": "admin", "password": ""}))["token"]
        if not self.agent_token:  # an agent's credential outlives master restarts
            self.agent_token = (await self.call("POST", "/api/v1/agent-credentials",
                                                {"description": "sim"}))["token"]
        await self.call("POST", "/api/v1/agents/register", {
            "id": AGENT, "slots": [{"id": 0, "type": "cpu"}, {"id": 1, "type": "cpu"}],
            "runningAllocations": [r.alloc_id for r in self.runs.values()
                                   if r.alloc_id not in self.ended]})

    async def restart(self) -> None:
        """The master comes back on the same database. Before any client retries anything, the
        committed state must be consistent, as the crash left it and once the new master has
        recovered: the retries must not be what heals it."""
        await self.stop()
        self.restarts += 1
        self.consistent("as the crash left it")
        await self.start(None, recovered=lambda: self.consistent("after recovery"))

    def consistent(self, when: str) -> None:
        if found := inconsistencies(self.settings.db_target):
            raise AssertionError(f"{when}: {'; '.join(found)} ({self.describe()})")

    async def stop(self) -> None:
        if self.client is not None:
            with contextlib.suppress(tx.SimulatedCrash):
                await self.client.close()
            self.client = None

    @property
    def crashed(self) -> bool:
        return self.plan.fired and self.restarts == 0

    async def call(self, method: str, path: str, body: Any = None, *,
                   task: str | None = None, ok: tuple[int, ...] = (200,)) -> Any:
        assert self.client is not None
        if self.crashed:
            raise MasterDown("crashed")
        headers = {"Authorization": f"Bearer {self.token}"}
        if path.startswith("/api/v1/agents/"):  # the agent protocol
            headers = {"Authorization": f"Bearer {self.agent_token}"}
        if task is not None:
            headers = {"Grpc-Metadata-x-allocation-token": f"Bearer {task}"}
        try:
            resp = await self.client.request(method, path, headers=headers,
                                             data=json.dumps(body) if body is not None else None)
            text = await resp.text()
        except (aiohttp.ClientError, tx.SimulatedCrash) as exc:
            raise MasterDown(str(exc)) from exc
        if self.crashed or resp.status >= 500:
            raise MasterDown(f"{method} {path}: {resp.status} {text[:300]}")
        if resp.status not in ok:
            raise AssertionError(f"{method} {path}: {resp.status} {text[:500]}")
        return json.loads(text) if text.strip() else {}

    # --- the script ----------------------------------------------------------------------

    async def run(self, rounds: int = 400) -> None:
        """Drive the scenario to its end, restarting the master whenever it crashes."""
        try:
            await self.start(self.plan)
        except MasterDown:
            await self.restart()
        for _ in range(rounds):
            try:
                if await self.step():
                    return
            except MasterDown:
                await self.restart()
        raise AssertionError(f"the scenario did not end: {self.describe()}")

    async def step(self) -> bool:
        await self.create_experiments()
        await self.doom()
        await self.take_work()
        for run in list(self.runs.values()):
            if run.alloc_id not in self.ended:
                await self.act(run)
        await self.control()
        states = {name: await self.exp_state(name) for name in CONFIGS}
        if states == {"single": "STATE_COMPLETED", "grid": "STATE_CANCELED"} and \
                self.done.get("doomed deleted"):
            return not [r for r in self.runs.values() if r.alloc_id not in self.ended]
        await asyncio.sleep(0.01)
        return False

    async def create_experiments(self) -> None:
        if len(self.exps) == len(CONFIGS):
            return
        listed = (await self.call("GET", "/api/v1/experiments"))["experiments"]
        known = {e["name"]: e["id"] for e in listed}
        for name, config in CONFIGS.items():
            if name in known:  # created, perhaps just before a crash
                self.exps[name] = known[name]
            elif name not in self.exps:
                made = await self.call("POST", "/api/v1/experiments",
                                       {"config": config, "modelDefinition": [], "activate": True})
                self.exps[name] = made["experiment"]["id"]

    async def doom(self) -> None:
        """The user creates `doomed` paused, cancels it, and deletes it."""
        if self.done.get("doomed deleted"):
            return
        if "doomed" not in self.exps:
            listed = (await self.call("GET", "/api/v1/experiments"))["experiments"]
            known = {e["name"]: e["id"] for e in listed}
            if "doomed" in known:  # created, perhaps just before a crash
                self.exps["doomed"] = known["doomed"]
            else:
                made = await self.call("POST", "/api/v1/experiments", {
                    "config": DOOMED, "modelDefinition": [], "activate": False})
                self.exps["doomed"] = made["experiment"]["id"]
        path = f"/api/v1/experiments/{self.exps['doomed']}"
        got = await self.call("GET", path, ok=(200, 404))
        if "experiment" not in got:  # gone (404): deleted, or finished by a restart
            self.done["doomed deleted"] = True
            return
        state = got["experiment"]["state"]
        if state == "STATE_PAUSED":
            await self.call("POST", f"{path}/cancel")
        elif state == "STATE_CANCELED":
            await self.call("DELETE", path, ok=(200, 404))

    async def take_work(self) -> None:
        work = await self.call("GET", f"/api/v1/agents/{AGENT}/work?timeout_seconds=0")
        for item in work["work"]:
            alloc_id = item["allocationId"]
            if item["kind"] == "start" and alloc_id not in self.runs:
                exp = next(n for n, i in self.exps.items() if i == item["experimentId"])
                self.runs[alloc_id] = Run(alloc_id, item["trialId"], item["runId"],
                                          item["sessionToken"], exp)
            elif item["kind"] == "kill" and alloc_id in self.runs:
                self.runs[alloc_id].exit_code = self.runs[alloc_id].exit_code or 137
            elif item["kind"] == "kill":  # a stray: report it gone
                self.runs[alloc_id] = Run(alloc_id, 0, 0, "", "?", exit_code=137)
        running = [r.alloc_id for r in self.runs.values()
                   if r.alloc_id not in self.ended and r.exit_code is None]
        await self.call("POST", f"/api/v1/agents/{AGENT}/heartbeat",
                        {"runningAllocations": running})

    async def act(self, run: Run) -> None:
        """What the trial process does, then its exit report."""
        if run.exit_code is None and not run.reported:
            await self.report(run)
        if run.exit_code is None:
            preempt = await self.call(
                "GET", f"/api/v1/allocations/{run.alloc_id}/signals/preemption?timeout_seconds=0",
                task=run.token, ok=(200, 401, 403, 404))
            if preempt.get("preempt"):
                await self.call("POST",
                                f"/api/v1/allocations/{run.alloc_id}/signals/ack_preemption",
                                task=run.token, ok=(200, 401, 403, 404))
                run.exit_code = 0
            elif self.finishes(run):
                run.exit_code = 0
        if run.exit_code is not None:
            await self.call("POST", f"/api/v1/agents/{AGENT}/allocations/{run.alloc_id}/exit",
                            {"exitCode": run.exit_code, "reason": ""}, ok=(200, 404))
            self.ended.add(run.alloc_id)

    def finishes(self, run: Run) -> bool:
        """`single` completes on its second run; `grid`'s first trial completes."""
        if run.exp == "single":
            return self.done.get("activated", False)
        grid_trials = sorted({r.trial_id for r in self.runs.values() if r.exp == "grid"})
        return run.trial_id == grid_trials[0]

    async def report(self, run: Run) -> None:
        task_id = (await self.call("GET", f"/api/v1/trials/{run.trial_id}",
                                   task=run.token))["trial"]["taskId"]
        for group in ("training", "validation"):
            steps = 10 * run.run_id
            body = {"group": group, "metrics": {
                "trialId": run.trial_id, "trialRunId": run.run_id, "stepsCompleted": steps,
                "metrics": {"avgMetrics": {"loss": 1.0 / steps}}}}
            await self.call("POST", f"/api/v1/trials/{run.trial_id}/metrics", body,
                            task=run.token)
            self.acked_metrics.add((run.trial_id, run.run_id, group, steps))
        await self.call("POST", f"/api/v1/trials/{run.trial_id}/progress",
                        {"progress": min(0.25 * run.run_id, 1.0)}, task=run.token)
        uuid = f"00000000-0000-4000-8000-{run.trial_id:06d}{run.run_id:06d}"
        await self.call("POST", "/api/v1/checkpoints", {
            "uuid": uuid, "taskId": task_id, "allocationId": run.alloc_id,
            "reportTime": "2026-11-24T00:00:00Z", "resources": {"model.pt": "1"},
            "metadata": {"steps_completed": 10 * run.run_id}, "state": "STATE_COMPLETED",
            "training": {}, "storageId": None}, task=run.token)
        self.acked_checkpoints.add(uuid)
        run.reported = True

    async def control(self) -> None:
        """The user: pause `single` once it has a checkpoint, activate it once paused; cancel
        `grid` once its second trial has reported."""
        single = [r for r in self.runs.values() if r.exp == "single"]
        if not self.done.get("paused") and any(r.reported for r in single):
            await self.call("POST", f"/api/v1/experiments/{self.exps['single']}/pause")
            self.done["paused"] = True
        paused_out = all(r.alloc_id in self.ended for r in single)  # the pause took effect
        if self.done.get("paused") and not self.done.get("activated"):
            state = await self.exp_state("single")
            if state == "STATE_PAUSED" and paused_out:
                await self.call("POST", f"/api/v1/experiments/{self.exps['single']}/activate")
                self.done["activated"] = True
            elif state == "STATE_ACTIVE":  # only our activate makes it ACTIVE after the pause
                self.done["activated"] = True  # (one that crashed after its commit: its next
                # run may have started before this look, so the runs are not all out)
        grid = sorted({r.trial_id for r in self.runs.values() if r.exp == "grid"})
        second = [r for r in self.runs.values() if len(grid) > 1 and r.trial_id == grid[1]]
        if not self.done.get("canceled") and any(r.reported for r in second):
            await self.call("POST", f"/api/v1/experiments/{self.exps['grid']}/cancel")
            self.done["canceled"] = True

    async def exp_state(self, name: str) -> str | None:
        if name not in self.exps:
            return None
        exp = await self.call("GET", f"/api/v1/experiments/{self.exps[name]}")
        return str(exp["experiment"]["state"])

    def describe(self) -> str:
        runs = [(r.alloc_id[-8:], r.exp, r.exit_code) for r in self.runs.values()]
        at = self.plan.trail[self.plan.at - 1] if 0 < self.plan.at <= len(self.plan.trail) else ""
        return (f"crash plan {self.plan} in {at}, restarts {self.restarts}, exps {self.exps}, "
                f"done {self.done}, runs {runs}, ended {len(self.ended)}")
