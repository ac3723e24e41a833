"""GPU discovery and sampling. NVML is faked at the `pynvml` module boundary only (no GPU
here); the no-GPU path runs for real."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from dettui import telemetry
from dettui.agent.agent import discover_slots
from tests.poll import until_async


def test_no_gpu_for_real_gives_cpu_slots_and_a_note() -> None:
    gpus, why = telemetry.detect_gpus()
    assert gpus == []
    assert why is not None and why.startswith("no NVIDIA GPU found")
    slots, note = discover_slots(3)
    assert [s["id"] for s in slots] == [0, 1, 2] and {s["type"] for s in slots} == {"cpu"}
    assert note is not None and "offering 3 CPU slots" in note


class FakeNvml(types.ModuleType):
    """Two GPUs; the second cannot report power (raises like NVML does)."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:  # noqa: N802
        return f"GPU-{h:04d}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:  # noqa: N802
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        return types.SimpleNamespace(total=80 * 2**30, used=(h + 1) * 2**30)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:  # noqa: N802
        return types.SimpleNamespace(gpu=50 + h, memory=10)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        return 60 + h

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:  # noqa: N802
        if h == 1:
            raise self.NVMLError("Not Supported")
        return [types.SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30)]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 250_000


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_one_slot_per_gpu(fake_nvml: FakeNvml) -> None:
    slots, note = discover_slots(4)
    assert note is None
    assert slots == [
        {"id": 0, "type": "cuda", "uuid": "GPU-0000", "brand": "NVIDIA A100-SXM4-80GB"},
        {"id": 1, "type": "cuda", "uuid": "GPU-0001", "brand": "NVIDIA A100-SXM4-80GB"},
    ]


def test_samples_with_unavailable_readings(fake_nvml: FakeNvml) -> None:
    a, b = telemetry.sample_gpus([0, 1])
    assert (a.utilization, a.memory_used, a.temperature, a.power) == (50.0, 2**30, 60.0, 250.0)
    assert b.power is None and b.temperature == 61.0
    assert a.processes == [{"pid": 4242, "memUsed": 3 * 2**30}] and b.processes is None
    assert a.name == "NVIDIA A100-SXM4-80GB"


def test_a_host_sample_in_the_wire_shape(fake_nvml: FakeNvml) -> None:
    host = telemetry.sample_host([0, 1])
    assert set(host) == {"time", "cpuPercent", "memUsed", "memTotal", "gpus"}
    assert 0 < host["memUsed"] <= host["memTotal"] and 0 <= host["cpuPercent"] <= 100
    assert host["gpus"] == [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "util": 50.0, "memUsed": 2**30,
         "memTotal": 80 * 2**30, "temperature": 60.0, "power": 250.0,
         "processes": [{"pid": 4242, "memUsed": 3 * 2**30}]},
        {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "util": 51.0, "memUsed": 2 * 2**30,
         "memTotal": 80 * 2**30, "temperature": 61.0, "power": None, "processes": None},
    ]


def test_a_gpu_that_vanished_reads_as_unavailable(fake_nvml: FakeNvml,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(i: int) -> int:
        raise fake_nvml.NVMLError("GPU is lost")

    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetHandleByIndex", gone)
    (gpu,) = telemetry.sample_host([0])["gpus"]
    assert gpu["index"] == 0 and gpu["util"] is None and gpu["memUsed"] is None


def test_a_host_sample_without_nvml_for_real() -> None:
    host = telemetry.sample_host([])
    assert host["gpus"] == [] and host["memTotal"] > 0 and host["time"] > 0


def test_tree_usage_measures_a_real_process_tree() -> None:
    import subprocess
    import sys
    import time

    import psutil

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        usage = telemetry.TreeUsage()
        procs = [psutil.Process(busy.pid)]
        usage.measure(procs)
        time.sleep(1.0)
        measured = usage.measure(procs)
        # A busy loop: a core's worth on an idle machine, a share of one with two test suites
        # on two cores (19.7 % seen); an idle process reads 0.
        assert measured["cpuPercent"] > 5, measured
        assert measured["rss"] > 1_000_000
    finally:
        busy.kill()
        busy.wait(5)


# --- a real agent against a real master --------------------------------------------------

BUSY_CONFIG = """
name: busy
entrypoint: python3 busy.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
hyperparameters: {}
max_restarts: 0
"""
BUSY = b"import time\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"


@pytest.fixture
async def master(aiohttp_client: Any, tmp_path: Any) -> Any:
    from dettui.master.app import create_app
    from dettui.master.settings import MasterSettings

    settings = MasterSettings(state_dir=tmp_path / "state", port=0, heartbeat_interval=0.2)
    client = await aiohttp_client(create_app(settings))
    resp = await client.post("/api/v1/auth/login", json={"username": "determined",
                                                         "password": ""})
    client.token = (await resp.json())["token"]
    resp = await client.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
    admin = (await resp.json())["token"]
    resp = await client.post("/api/v1/agent-credentials", json={},
                             headers={"Authorization": f"Bearer {admin}"})
    assert resp.status == 200, await resp.text()
    client.agent_token = (await resp.json())["token"]  # agents join with their own credential
    return client


async def _agents(master: Any) -> list[dict[str, Any]]:
    resp = await master.get("/api/v1/agents",
                            headers={"Authorization": f"Bearer {master.token}"})
    assert resp.status == 200
    return list((await resp.json())["agents"])


async def _until(master: Any, check: Any, timeout: float = 20) -> dict[str, Any]:
    """The first agent, once `check` holds for it."""
    agents = await until_async(lambda: _agents(master), "the agent's telemetry to match",
                               timeout=timeout, done=lambda agents: agents and check(agents[0]))
    return agents[0]


async def test_heartbeats_carry_telemetry_and_the_master_keeps_a_bounded_history(
        master: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import base64

    from dettui.agent import agent as agent_mod
    from dettui.agent import process
    from dettui.client import Client
    from dettui.master import telemetry as master_telemetry

    monkeypatch.setattr(process, "become_subreaper", lambda: False)  # not the test runner
    monkeypatch.setattr(agent_mod, "SAMPLE_SECONDS", 0.1)
    monkeypatch.setattr(master_telemetry, "HISTORY", 8)
    url = str(master.make_url("")).rstrip("/")
    client = Client(url, master.token)
    agent = agent_mod.Agent(agent_mod.AgentOptions(url, "tele", cpu_slots=1,
                                                   work_root=tmp_path / "work"),
                            Client(url, master.agent_token))
    running = asyncio.create_task(agent.run())
    try:
        first = await _until(master, lambda a: a["telemetry"] is not None)
        assert first["noGpuReason"].startswith("no NVIDIA GPU found")
        tel = first["telemetry"]
        assert tel["gpus"] == [] and 0 < tel["memUsed"] <= tel["memTotal"]
        assert tel["history"]["gpuUtil"] == {}
        # A busy allocation: its process tree's CPU and RSS arrive with the heartbeats.
        files = [{"path": "busy.py", "type": 48, "content": base64.b64encode(BUSY).decode(),
                  "mtime": "1700000000", "mode": 33188, "uid": 0, "gid": 0}]
        exp = await client.create_experiment(BUSY_CONFIG, files)
        busy = await _until(master, lambda a: a["telemetry"]["time"] > tel["time"] + 1.2 and any(
            u["cpuPercent"] > 20 and u["rss"] > 1_000_000
            for u in a["telemetry"]["allocations"].values())
            and len(a["telemetry"]["history"]["time"]) >= 8)  # heartbeats slow on a busy box
        (alloc_id,) = busy["telemetry"]["allocations"]
        # the slot's container is the allocation's part on this agent (node rank 0)
        assert busy["slots"]["0"]["container"]["id"] == f"{alloc_id.split('.', 1)[1]}.0"
        history = busy["telemetry"]["history"]
        assert len(history["time"]) == len(history["cpu"]) == len(history["mem"]) == 8
        assert history["time"] == sorted(set(history["time"]))
        assert history["time"][-1] == round(busy["telemetry"]["time"], 1)
        assert all(0 <= m <= 100 for m in history["mem"])
        await client.experiment_action(exp["experiment"]["id"], "kill")
        await _until(master, lambda a: not a["telemetry"]["allocations"])
    finally:
        agent.stop()
        await asyncio.wait_for(running, 30)
        await client.close()
    assert await _agents(master) == []  # it said it was leaving
