"""GPU discovery and usage sampling: NVML through pynvml when present, psutil always.

Never imports the UI. A reading that is unavailable is None, never a crash. `sample_host`
returns one sample in the shape the agent ships with its heartbeat and the master serves in
GET /api/v1/agents (`telemetry`): camelCase, bytes, percent, Celsius, watts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psutil

log = logging.getLogger("dettui.telemetry")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total: int


@dataclass(frozen=True)
class GpuSample:
    index: int
    utilization: float | None  # percent
    memory_used: int | None
    memory_total: int | None
    temperature: float | None  # Celsius
    power: float | None  # watts
    processes: list[dict[str, int | None]] | None = None  # {"pid", "memUsed"} on this GPU
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "util": self.utilization,
            "memUsed": self.memory_used, "memTotal": self.memory_total,
            "temperature": self.temperature, "power": self.power,
            "processes": self.processes,
        }


def _nvml() -> Any:
    import pynvml

    return pynvml


def detect_gpus() -> tuple[list[Gpu], str | None]:
    """The NVIDIA GPUs on this machine, or ([], why none were found)."""
    try:
        nv = _nvml()
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound and friends
        return [], f"no NVIDIA GPU found ({type(exc).__name__}: {exc})"
    try:
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = nv.nvmlDeviceGetUUID(h)
            name = nv.nvmlDeviceGetName(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            gpus.append(Gpu(i, _text(uuid), _text(name), int(mem.total)))
        return gpus, (None if gpus else "no NVIDIA GPU found (NVML reports 0 devices)")
    except Exception as exc:  # noqa: BLE001
        return [], f"no NVIDIA GPU found ({type(exc).__name__}: {exc})"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a reading this GPU does not support
        return None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def sample_gpus(indices: list[int]) -> list[GpuSample]:
    if not indices:
        return []
    nv = _nvml()
    out = []
    for i in indices:
        h = _read(nv.nvmlDeviceGetHandleByIndex, i)
        if h is None:
            out.append(GpuSample(i, None, None, None, None, None))
            continue
        util = _read(nv.nvmlDeviceGetUtilizationRates, h)
        mem = _read(nv.nvmlDeviceGetMemoryInfo, h)
        temp = _read(nv.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
        power = _read(nv.nvmlDeviceGetPowerUsage, h)
        procs = _read(nv.nvmlDeviceGetComputeRunningProcesses, h)
        name = _read(nv.nvmlDeviceGetName, h)
        out.append(GpuSample(
            i, float(util.gpu) if util is not None else None,
            int(mem.used) if mem is not None else None,
            int(mem.total) if mem is not None else None,
            float(temp) if temp is not None else None,
            power / 1000.0 if power is not None else None,
            [{"pid": int(p.pid), "memUsed": _int_or_none(getattr(p, "usedGpuMemory", None))}
             for p in procs] if procs is not None else None,
            _text(name) if name is not None else None,
        ))
    return out


def sample_host(gpu_indices: list[int]) -> dict[str, Any]:
    """One telemetry sample of this machine: `{"time", "cpuPercent", "memUsed", "memTotal",
    "gpus": [{"index", "name", "util", "memUsed", "memTotal", "temperature", "power",
    "processes": [{"pid", "memUsed"}] | None}]}`. CPU percent is since the previous call."""
    vm = psutil.virtual_memory()
    return {
        "time": time.time(),
        "cpuPercent": psutil.cpu_percent(interval=None),
        "memUsed": int(vm.used),
        "memTotal": int(vm.total),
        "gpus": [s.to_json() for s in sample_gpus(gpu_indices)],
    }


class TreeUsage:
    """CPU % and RSS of process trees, sampled repeatedly (psutil needs the same Process
    objects between calls to measure CPU)."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def measure(self, procs: list[psutil.Process]) -> dict[str, float]:
        cpu = rss = 0.0
        seen = {}
        for proc in procs:
            known = self._procs.get(proc.pid, proc)
            try:
                cpu += known.cpu_percent(interval=None)
                rss += known.memory_info().rss
                seen[proc.pid] = known
            except psutil.Error:
                continue
        self._procs.update(seen)
        return {"cpuPercent": round(cpu, 1), "rss": int(rss)}

    def forget(self, alive: set[int]) -> None:
        self._procs = {pid: p for pid, p in self._procs.items() if pid in alive}
