"""What each running trial uses (issue 33, item 4): a real agent samples its trial's processes
(CPU from their CPU times, RSS, and with NVML, faked at the `pynvml` boundary only, their GPU
use), ships it with its heartbeats, and the master shows it as the trial's `resources` (REST
and the stream) and under the agent (`trialResources`), keeping only an agent's own
allocations."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import types
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest

from dettui import telemetry
from dettui.master.trial_usage import HISTORY, STALE, TrialUsage
from dettui.protocol import TelemetrySample
from tests.agent.test_telemetry import FakeNvml, master  # noqa: F401 - the master fixture
from tests.poll import until_async

pytestmark = pytest.mark.both_ways  # trials forked and fresh (conftest)

MIB = 2**20
CONFIG = """
name: {name}
entrypoint: python3 {script}
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
hyperparameters: {{}}
max_restarts: 0
"""
# Nine busy processes (the entrypoint and eight children: the tree is summed, and the trial
# gets its share of two cores shared with other test runs, 20 busy processes seen) and
# ~100 MB written, so resident.
BURN = b"""import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(8)]
ballast = b"x" * (100 * 2**20)
end = time.time() + 120
while time.time() < end:
    pass
"""
GPU = b"import time\nend = time.time() + 120\nwhile time.time() < end:\n    time.sleep(0.05)\n"


def _files(name: str, content: bytes) -> list[dict[str, Any]]:
    return [{"path": name, "type": 48, "content": base64.b64encode(content).decode(),
             "mtime": "1700000000", "mode": 33188, "uid": 0, "gid": 0}]


async def _get(api: Any, path: str, token: str | None = None) -> Any:
    resp = await api.get(path, headers={"Authorization": f"Bearer {token or api.token}"})
    assert resp.status == 200, await resp.text()
    return await resp.json()


@pytest.fixture
async def agent(master: Any, tmp_path: Any,  # noqa: F811
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    from dettui.agent import agent as agent_mod
    from dettui.agent import process
    from dettui.client import Client

    monkeypatch.setattr(process, "become_subreaper", lambda: False)  # not the test runner
    monkeypatch.setattr(agent_mod, "SAMPLE_SECONDS", 0.25)
    url = str(master.make_url("")).rstrip("/")
    running = []

    def start(agent_id: str = "worker") -> Any:
        made = agent_mod.Agent(agent_mod.AgentOptions(url, agent_id, cpu_slots=1,
                                                      work_root=tmp_path / agent_id),
                               Client(url, master.agent_token))
        running.append((made, asyncio.create_task(made.run())))
        return made

    yield start
    for made, task in running:
        made.stop()
        await asyncio.wait_for(task, 30)
        await made.client.close()


async def _experiment(api: Any, name: str, script: str, content: bytes) -> int:
    resp = await api.post(
        "/api/v1/experiments", headers={"Authorization": f"Bearer {api.token}"},
        json={"activate": True, "config": CONFIG.format(name=name, script=script),
              "modelDefinition": _files(script, content)})
    assert resp.status == 200, await resp.text()
    return int((await resp.json())["experiment"]["id"])


async def _trial(api: Any, exp_id: int, done: Any, what: str,
                 timeout: float = 60) -> dict[str, Any]:
    async def look() -> dict[str, Any] | None:
        trials = (await _get(api, f"/api/v1/experiments/{exp_id}/trials"))["trials"]
        return trials[0] if trials else None
    found = await until_async(look, what, timeout=timeout,
                              done=lambda t: t is not None and done(t))
    assert found is not None
    return found


def _busy(trial: dict[str, Any]) -> bool:
    used = trial.get("resources")
    return used is not None and used["cpuPercent"] > 50 and used["rssBytes"] > 80 * MIB


async def test_a_trial_burning_cpu_and_memory_shows_both_and_a_hostile_agent_is_ignored(
        master: Any, agent: Any) -> None:  # noqa: F811
    agent("worker")
    exp_id = await _experiment(master, "burn", "burn.py", BURN)
    trial = await _trial(master, exp_id, _busy, "the burning trial's resources")
    used = trial["resources"]
    assert trial["state"] == "STATE_RUNNING"
    assert used["gpuUtil"] is None and used["gpuMemoryBytes"] is None  # no GPU here
    assert isinstance(used["cpuPercent"], float) and isinstance(used["rssBytes"], int)
    history = used["history"]
    assert 1 <= len(history["cpuPercent"]) == len(history["rssBytes"]) <= HISTORY
    assert history["cpuPercent"][-1] == used["cpuPercent"]
    assert used["sampledAt"].endswith("Z")
    # the same object on GET /api/v1/trials/{id}, and under the agent
    one = (await _get(master, f"/api/v1/trials/{trial['id']}"))["trial"]
    assert one["resources"]["cpuPercent"] > 0
    (worker,) = (await _get(master, "/api/v1/agents"))["agents"]
    (part,) = worker["trialResources"]
    assert (part["trialId"], part["experimentId"]) == (trial["id"], exp_id)
    assert part["allocationId"].startswith(f"{exp_id}.")

    # A second agent (its own credential) claims the first one's allocation: never shown.
    thief = await _register(master, "thief")
    for _ in range(3):
        resp = await master.post(
            "/api/v1/agents/thief/heartbeat", headers={"Authorization": f"Bearer {thief}"},
            json={"runningAllocations": [], "samples": [
                {"time": 1e9 + _, "allocations": {part["allocationId"]: {
                    "cpuPercent": 654321.0, "rss": 7, "gpuUtil": 99.0,
                    "gpuMemory": 5}}}]})
        assert resp.status == 200, await resp.text()
        shown = (await _get(master, f"/api/v1/trials/{trial['id']}"))["trial"]["resources"]
        assert shown["cpuPercent"] != 654321.0 and shown["rssBytes"] > 80 * MIB
    agents = {a["id"]: a for a in (await _get(master, "/api/v1/agents"))["agents"]}
    assert agents["thief"]["trialResources"] == []

    # Numbers out of bounds, or an allocation id too long, drop the sample (the heartbeat
    # still succeeds).
    for key, bad in [(part["allocationId"], {"cpuPercent": 1e300}),
                     (part["allocationId"], {"rss": -1}),
                     (part["allocationId"], {"gpuUtil": 101.0}),
                     (part["allocationId"], {"cpuPercent": True}),
                     ("x" * 300, {"cpuPercent": 1.0})]:
        resp = await master.post(
            "/api/v1/agents/thief/heartbeat", headers={"Authorization": f"Bearer {thief}"},
            json={"samples": [{"time": 2e9, "allocations": {key: bad}}]})
        assert resp.status == 200, await resp.text()
    agents = {a["id"]: a for a in (await _get(master, "/api/v1/agents"))["agents"]}
    assert agents["thief"]["telemetry"]["time"] < 2e9  # none of them was kept

    # Killed: no resources on the trial that no longer runs.
    resp = await master.post(f"/api/v1/experiments/{exp_id}/kill",
                             headers={"Authorization": f"Bearer {master.token}"})
    assert resp.status == 200, await resp.text()
    ended = await _trial(master, exp_id, lambda t: t["state"] != "STATE_RUNNING",
                         "the trial to stop")
    assert "resources" not in ended


async def test_the_stream_carries_a_running_trials_resources(
        master: Any, agent: Any) -> None:  # noqa: F811
    from dettui.client import Client

    agent("worker")
    exp_id = await _experiment(master, "burn", "burn.py", BURN)
    client = Client(str(master.make_url("")).rstrip("/"), master.token)
    rows: dict[str, dict[str, Any]] = {}

    async def watch() -> None:
        async for message in client.changes([f"experiment:{exp_id}"]):
            for obj in message.get("upsert", []):
                rows[str(obj["id"])] = obj

    follower = asyncio.create_task(watch())
    try:
        await until_async(lambda: list(rows.values()), "a streamed row with resources",
                          timeout=60, done=lambda r: any(_busy(t) for t in r))
        first = next(t for t in rows.values() if _busy(t))["resources"]["sampledAt"]
        # it moves on without any change in the store: the heartbeats' samples alone
        await until_async(lambda: list(rows.values()), "a newer streamed sample", timeout=30,
                          done=lambda r: any(t.get("resources", {}).get("sampledAt", first)
                                             > first for t in r))
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await client.close()
        await master.post(f"/api/v1/experiments/{exp_id}/kill",
                          headers={"Authorization": f"Bearer {master.token}"})


async def _register(api: Any, agent_id: str) -> str:
    admin = (await (await api.post("/api/v1/auth/login", json={
        "username": "admin", "password": ""})).json())["token"]
    resp = await api.post("/api/v1/agent-credentials", json={},
                             headers={"Authorization": f"Bearer {admin}"})
    token = str((await resp.json())["token"])
    resp = await api.post("/api/v1/agents/register", headers={
        "Authorization": f"Bearer {token}"}, json={"id": agent_id, "slots": [{"id": 0}]})
    assert resp.status == 200, await resp.text()
    return token


# --- with NVML (faked at the pynvml boundary) ---------------------------------------------

FOREIGN_PID = 999_999  # another user's process on the trial's GPU: not the trial's


def _trial_pids() -> list[int]:
    """The python processes running gpu.py under this test process (the in-process agent's
    trial), as NVML would list them on the trial's GPU."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        if argv and argv[-1] == "gpu.py" and "python" in os.path.basename(argv[0]):
            found.append(proc.pid)
    return found


class TrialNvml(FakeNvml):
    """Two GPUs; on GPU 0 the trial's processes hold 3 GiB and use 70% of the SMs, and a
    foreign process 1 GiB and 20%; GPU 1 is idle."""

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:  # noqa: N802
        if h != 0:
            return []
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=3 * 2**30)
                for pid in _trial_pids()] + [
            types.SimpleNamespace(pid=FOREIGN_PID, usedGpuMemory=2**30)]

    def nvmlDeviceGetProcessUtilization(self, h: int, since: int) -> list[Any]:  # noqa: N802
        if h != 0:
            raise type("NVMLError_NotFound", (self.NVMLError,), {})("Not Found")
        return [types.SimpleNamespace(pid=pid, smUtil=u, memUtil=10, timeStamp=since + 1)
                for pid in _trial_pids() for u in (60, 80)] + [
            types.SimpleNamespace(pid=FOREIGN_PID, smUtil=20, memUtil=5, timeStamp=since + 1)]


async def test_with_nvml_a_trial_shows_its_own_gpu_use(
        master: Any, agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setitem(sys.modules, "pynvml", TrialNvml())
    made = agent("gpu-box")
    assert made.gpu_indices == [0, 1]
    exp_id = await _experiment(master, "gpu", "gpu.py", GPU)
    # 0% until the sample that first sees the trial's process on the GPU
    trial = await _trial(master, exp_id, lambda t: (t.get("resources") or {}).get("gpuUtil"),
                         "the trial's GPU use")
    used = trial["resources"]
    assert used["gpuUtil"] == 70.0  # its one process, 60 and 80 averaged; not the foreign 20
    assert used["gpuMemoryBytes"] == 3 * 2**30
    await master.post(f"/api/v1/experiments/{exp_id}/kill",
                      headers={"Authorization": f"Bearer {master.token}"})


def test_allocation_gpu_without_per_process_utilisation() -> None:
    """Where NVML cannot split a GPU's use by process, a GPU only the allocation uses counts
    whole, a shared one is unknown, an idle one is 0."""
    def gpu(index: int, procs: list[int] | None, util: float = 90.0) -> telemetry.GpuSample:
        listed = None if procs is None else [{"pid": p, "memUsed": 2**30} for p in procs]
        return telemetry.GpuSample(index, util, None, None, None, None, listed)

    assert telemetry.allocation_gpu([gpu(0, [1, 2])], [0], {1, 2}) == (90.0, 2 * 2**30)
    assert telemetry.allocation_gpu([gpu(0, [1, 3])], [0], {1, 2}) == (None, 2**30)
    assert telemetry.allocation_gpu([gpu(0, []), gpu(1, [1])], [0, 1], {1}) == (45.0, 2**30)
    assert telemetry.allocation_gpu([gpu(0, None)], [0], {1}) == (None, None)
    assert telemetry.allocation_gpu([gpu(0, [1])], [], {1}) == (None, None)  # CPU slots


# --- the master's bookkeeping ---------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now


def _sample(t: float, **allocs: dict[str, Any]) -> TelemetrySample:
    return TelemetrySample.model_validate({"time": t, "allocations": {
        k.replace("_", "."): v for k, v in allocs.items()}})


def test_parts_on_two_agents_sum_and_the_history_is_capped() -> None:
    clock = Clock()
    usage = TrialUsage(clock.monotonic, clock.wall)
    live = {"3.r.1": 7}
    for i in range(HISTORY + 10):
        clock.now += 1
        changed = usage.record("a", live, [_sample(i, **{"3_r_1": {"cpuPercent": 100.0 + i,
                                                                    "rss": 10}})])
        assert changed == {3: {7}}
        usage.record("b", live, [_sample(i, **{"3_r_1": {"cpuPercent": 50.0, "rss": 5,
                                                          "gpuUtil": 40.0,
                                                          "gpuMemory": 8}})])
    view = usage.views[7]
    assert len(view["history"]["cpuPercent"]) == HISTORY
    assert view["cpuPercent"] == 100.0 + HISTORY + 9 + 50.0 and view["rssBytes"] == 15
    assert view["gpuUtil"] is None and view["gpuMemoryBytes"] is None  # a has no GPU reading
    assert [o["trialId"] for o in usage.by_agent["a"]] == [7]
    assert usage.by_agent["b"][0]["gpuUtil"] == 40.0
    assert set(usage.by_agent) == {"a", "b"}


def test_an_ended_allocation_a_silent_agent_and_a_restart_leave_no_numbers() -> None:
    clock = Clock()
    usage = TrialUsage(clock.monotonic, clock.wall)
    usage.record("a", {"3.r.1": 7}, [_sample(1, **{"3_r_1": {"cpuPercent": 5.0, "rss": 1}})])
    usage.record("b", {"4.r.1": 8}, [_sample(1, **{"4_r_1": {"cpuPercent": 5.0, "rss": 1}})])
    assert usage.record("a", {}, []) == {3: {7}}  # its allocation ended
    assert 7 not in usage.views and "a" not in usage.by_agent
    clock.now += STALE + 1  # b went silent; a's next heartbeat sweeps it
    usage.record("a", {}, [])
    assert 8 not in usage.views
    # a restart of trial 7: the new allocation's samples start a new history
    usage.record("a", {"3.r.1": 7}, [_sample(2, **{"3_r_1": {"cpuPercent": 9.0, "rss": 1}})])
    usage.record("a", {"3.r.2": 7}, [_sample(3, **{"3_r_2": {"cpuPercent": 1.0, "rss": 1}})])
    assert usage.views[7]["history"]["cpuPercent"] == [1.0]
    assert usage.forget_agent("a") == {3: {7}} and usage.views == {}


def test_an_agent_cannot_speak_for_allocations_not_its_own() -> None:
    usage = TrialUsage()
    assert usage.record("thief", {}, [_sample(1, **{"3_r_1": {"cpuPercent": 5.0}})]) == {}
    assert usage.views == {} and usage.by_agent == {}
