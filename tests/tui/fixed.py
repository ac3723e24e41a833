"""Fixed data for the dashboard's snapshot and pilot tests: a stand-in client at the API
boundary (the screens, widgets and stream handling are the real ones)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from dettui.commands.dashboard import Dashboard

T = "2026-11-22T12:00:00Z"


def job(i: int, state: str, slots: str) -> dict[str, Any]:
    acquired, needed = slots.split("/")
    return {"jobId": f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd", "type": "TYPE_EXPERIMENT",
            "name": f"spirals-{i}", "entityId": str(i), "priority": 42 - i, "weight": 1,
            "submissionTime": T, "allocatedSlots": int(acquired),
            "requestedSlots": int(needed), "username": "determined",
            "resourcePool": "default", "summary": {"state": state, "jobsAhead": i - 1},
            "experimentState": "STATE_PAUSED" if i == 3 else "STATE_ACTIVE"}


EXPERIMENTS = [{"id": i, "name": f"spirals-{i}", "state": s, "progress": p, "numTrials": n,
                "searcherType": st, "bestTrialSearcherMetric": b, "resourcePool": "default",
                "username": "determined", "archived": False}
               for i, s, p, n, st, b in [(1, "STATE_ACTIVE", 0.4, 8, "adaptive_asha", 0.21),
                                         (2, "STATE_PAUSED", 0.0, 1, "single", None),
                                         (3, "STATE_COMPLETED", 1.0, 20, "random", 0.0013)]]
TRIALS = [{"id": i, "state": s, "totalBatchesProcessed": b, "restarts": r,
           "hparams": {"learning_rate": lr, "hidden": h},
           "bestValidation": {"metrics": {"avgMetrics": {"validation_loss": v}}},
           "latestValidation": {"metrics": {"avgMetrics": {"validation_loss": v + 0.01}}}}
          for i, s, b, r, lr, h, v in [(1, "STATE_RUNNING", 250, 0, 0.03, 64, 0.21),
                                       (2, "STATE_COMPLETED", 100, 1, 0.2, 8, 0.55)]]
AGENT = {"id": "vm-local", "hostname": "vm", "resourcePools": ["default"], "enabled": True,
         "slots": {"0": {"device": {"type": "TYPE_CPU"}, "container": {"id": "1.abc.1"}},
                   "1": {"device": {"type": "TYPE_CPU"}, "container": None}},
         "noGpuReason": "NVMLError_LibraryNotFound",
         "telemetry": {"cpuPercent": 48.0, "memUsed": 3 * 2**30, "memTotal": 8 * 2**30,
                       "gpus": [],
                       "allocations": {"1.abc.1": {"cpuPercent": 97.0, "rss": 300 * 2**20}},
                       "history": {"cpu": [10, 40, 80, 50, 48], "mem": [30, 35, 37, 37, 38],
                                   "gpuUtil": {}}}}
GPU_AGENT = {
    "id": "gpu-box", "hostname": "gpu-box", "resourcePools": ["gpu"], "enabled": True,
    "noGpuReason": None,
    "slots": {str(i): {"device": {"type": "TYPE_CUDA"},
                       "container": {"id": "7.def.1"} if i == 0 else None} for i in range(2)},
    "telemetry": {"cpuPercent": 12.0, "memUsed": 20 * 2**30, "memTotal": 64 * 2**30,
                  "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "util": u,
                            "memUsed": m * 2**30, "memTotal": 40 * 2**30, "temperature": t,
                            "power": w, "processes": p}
                           for i, u, m, t, w, p in [(0, 93.0, 31.5, 71.0, 310.0,
                                                     [{"pid": 4242, "memUsed": 31 * 2**30}]),
                                                    (1, 0.0, 0.4, 34.0, 55.0, [])]],
                  "allocations": {"7.def.1": {"cpuPercent": 105.0, "rss": 5 * 2**30}},
                  "history": {"cpu": [10, 12, 14, 12], "mem": [30, 31, 31, 31],
                              "gpuUtil": {"0": [20, 60, 90, 93], "1": [0, 0, 0, 0]}}}}


class FixedClient:
    def __init__(self, agents: list[dict[str, Any]] | None = None) -> None:
        self.agent_list = agents or [AGENT]  # (`agents()` is the API call)
        self.actions: list[tuple[Any, ...]] = []

    async def changes(self, topics: list[str], **_: Any) -> AsyncIterator[dict[str, Any]]:
        data = {"jobs": ([job(1, "STATE_RUNNING", "1/1"), job(2, "STATE_QUEUED", "0/2"),
                          job(3, "STATE_QUEUED", "0/1")], "jobId"),
                "experiments": (EXPERIMENTS, "id"), "agents": (self.agent_list, "id"),
                "experiment:1": (TRIALS, "id")}
        for topic in topics:
            objs, key = data[topic.partition("?")[0]]
            yield {"topic": topic, "kind": "snapshot", "upsert": objs, "remove": [],
                   "order": [str(o[key]) for o in objs], "total": len(objs)}
        await asyncio.Event().wait()

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return {**EXPERIMENTS[0], "config": {"searcher": {"metric": "validation_loss"},
                                             "checkpoint_storage": {"save_trial_best": 1}}}

    async def metrics(self, trial_id: int, group: str | None = None,
                      after_steps: int | None = None) -> list[dict[str, Any]]:
        if after_steps is not None:
            return []
        return [{"stepsCompleted": s, "metrics": {"avgMetrics": {"validation_loss": v}}}
                for s, v in [(50, 0.69), (100, 0.6), (150, 0.4), (200, 0.25), (250, 0.21)]]

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        rows = await self.metrics(trial_id, group)
        return {"series": [{"name": "validation_loss",
                            "steps": [r["stepsCompleted"] for r in rows],
                            "values": [r["metrics"]["avgMetrics"]["validation_loss"]
                                       for r in rows]}],
                "lastSteps": rows[-1]["stepsCompleted"]}

    async def newest_checkpoints(self, exp_id: int,
                                 limit: int) -> tuple[list[dict[str, Any]], int]:
        found = await self.checkpoints(exp_id)
        return found[:limit], len(found)

    async def checkpoints(self, exp_id: int) -> list[dict[str, Any]]:
        return [{"uuid": "6b8f2ab8-fc66-485e-83b5-f15023eb2e82", "state": "STATE_COMPLETED",
                 "metadata": {"steps_completed": 200}, "training": {"trialId": 1,
                                                                    "searcherMetric": 0.25}}]

    async def trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for i in range(6):
            loss = 1 / (i + 1)
            yield {"rankId": i % 2, "message": f"[rank={i % 2}] step {i * 10}: loss {loss:.3f}"}
        yield {"rankId": 1, "message": "[rank=1] ERROR: something failed"}
        await asyncio.Event().wait()

    async def pools(self) -> list[dict[str, Any]]:
        return [{"name": "default", "slotsUsed": 1, "slotsAvailable": 2,
                 "schedulerType": "SCHEDULER_TYPE_PRIORITY"}]

    async def experiment_action(self, exp_id: int, action: str) -> None:
        self.actions.append((exp_id, action))

    async def update_job(self, job_id: str, **change: Any) -> None:
        self.actions.append(("update_job", job_id, change))

    async def set_agent_enabled(self, agent_id: str, enabled: bool) -> None:
        self.actions.append(("set_agent_enabled", agent_id, enabled))

    async def delete_experiment(self, exp_id: int) -> None:
        self.actions.append(("delete_experiment", exp_id))

    async def close(self) -> None:
        pass

    async def trial_log_page(self, trial_id: int, **_: Any) -> list[dict[str, Any]]:
        """The fixed trials' lines all come from their follower (`trial_logs`): no page of
        earlier ones."""
        return []

    def follow_trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        return self.trial_logs(trial_id)


class NoMetrics(FixedClient):
    """A trial that has reported no metrics yet."""

    async def metrics(self, trial_id: int, group: str | None = None,
                      after_steps: int | None = None) -> list[dict[str, Any]]:
        return []

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        return {"series": [], "lastSteps": None}


class FixedDashboard(Dashboard):
    def __init__(self, agents: list[dict[str, Any]] | None = None,
                 client: type[FixedClient] = FixedClient) -> None:
        super().__init__("http://fixed", Path("/nonexistent"))
        self.agents = agents
        self.client_type = client

    async def connect(self) -> Any:
        self.sub_title = "fixed data"
        return self.client_type(self.agents)


def asha_trial(i: int) -> dict[str, Any]:
    """Trial i of a 16-trial ASHA search (rungs at 4, 16 and 64 batches): nested
    hyperparameters, two validation metrics; 1-12 stopped at rung 0, 13-15 at rung 1, 16 runs
    on (with its CPU, RSS and GPU as the agent samples them)."""
    lr = round(0.0005 * 1.6 ** i, 6)
    loss = round(0.2 + abs(i - 11) * 0.037, 4)
    steps = 4 if i <= 12 else 16 if i <= 15 else 48
    metrics = {"validation_loss": loss, "accuracy": round(1 - loss / 2, 4)}
    trial: dict[str, Any] = {
        "id": i, "state": "STATE_RUNNING" if i == 16 else "STATE_COMPLETED",
        "totalBatchesProcessed": steps, "restarts": 1 if i == 7 else 0,
        "hparams": {"optimizer": {"lr": lr, "momentum": 0.9 if i % 2 else 0.99},
                    "hidden": 2 ** (4 + i % 4), "dropout": round(0.05 * (i % 5), 2),
                    "activation": "tanh" if i % 3 else "relu"},
        "bestValidation": {"metrics": {"avgMetrics": metrics}},
        "latestValidation": {"metrics": {"avgMetrics": {
            k: round(v + 0.01, 4) for k, v in metrics.items()}}},
        "stoppedBySearcher": i <= 15}
    if i == 16:
        trial["resources"] = {"cpuPercent": 97.0, "rssBytes": 734 * 2**20, "gpuUtil": 88.0,
                              "gpuMemoryBytes": 31 * 2**30,
                              "history": {"cpuPercent": [12.0, 40.0, 85.0, 99.0, 97.0],
                                          "rssBytes": [2**29, 6 * 2**27, 734 * 2**20]}}
    return trial


ASHA_TRIALS = [asha_trial(i) for i in range(1, 17)]


class AshaClient(FixedClient):
    """Experiment 1 as a 16-trial ASHA search (`asha_trial`), smaller validation_loss better."""

    async def changes(self, topics: list[str], **kw: Any) -> AsyncIterator[dict[str, Any]]:
        async for change in super().changes(topics, **kw):
            if change.get("topic") == "experiment:1":
                change = {**change, "upsert": ASHA_TRIALS,
                          "order": [str(t["id"]) for t in ASHA_TRIALS]}
            yield change

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        got = await super().experiment(exp_id)
        searcher = {"name": "adaptive_asha", "metric": "validation_loss",
                    "smaller_is_better": True, "max_trials": 16, "max_time": 64,
                    "time_metric": "batches"}
        return {**got, "numTrials": 16, "config": {**got["config"], "searcher": searcher}}


def trial_resources(trial_id: int, exp_id: int, cpu: list[float], rss_mib: list[int],
                    gpu: tuple[float, int] | None = None) -> dict[str, Any]:
    """One trial's part on an agent as GET /api/v1/agents shows it (`trialResources`)."""
    return {"trialId": trial_id, "experimentId": exp_id,
            "allocationId": f"{exp_id}.0b5e2c1a-3f4d-4e6f-8a9b-{trial_id:012d}.1",
            "cpuPercent": cpu[-1], "rssBytes": rss_mib[-1] * 2**20,
            "gpuUtil": gpu[0] if gpu else None,
            "gpuMemoryBytes": gpu[1] if gpu else None,
            "history": {"cpuPercent": cpu, "rssBytes": [m * 2**20 for m in rss_mib]},
            "sampledAt": T}


RESOURCE_AGENT = {**AGENT, "trialResources": [
    trial_resources(1, 1, [20.0, 60.0, 97.0, 180.0, 195.0, 97.0] * 10,
                    [100, 180, 250, 300, 300, 310] * 10),
    trial_resources(4, 1, [5.0, 8.0, 12.0], [40, 41, 41])]}
RESOURCE_GPU_AGENT = {**GPU_AGENT, "trialResources": [
    trial_resources(7, 2, [100.0, 104.0, 105.0], [5000, 5100, 5120], (93.0, 31 * 2**30))]}


LONG_LINE = "x" * 150 + "MIDDLE" + "y" * 150 + "END"
MARKED_LINES = [  # a trial's lines with each level and stream the logs screen marks
    {"id": "1", "rankId": 0, "log": LONG_LINE, "level": "LOG_LEVEL_UNSPECIFIED"},
    {"id": "2", "rankId": 0, "log": "loss 0.5 [bold]not markup[/]", "level": "LOG_LEVEL_INFO"},
    {"id": "3", "rankId": 0, "log": "2026-11-27 14:00:00,001 WARNING: lr too high",
     "stdtype": "stderr"},
    {"id": "4", "rankId": 1, "log": "E1127 14:00:00.123 bad shard", "stdtype": "stderr"},
    {"id": "5", "rankId": 1, "log": "level=debug loss 0.4"},
    {"id": "6", "rankId": 1, "log": "Traceback (most recent call last):", "stdtype": "stderr"},
]


class MarkedLogs(FixedClient):
    async def trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for item in MARKED_LINES:
            yield item
        await asyncio.Event().wait()
