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
    # SM utilisation (percent of this GPU) by pid over the last seconds; None: NVML cannot
    # tell (not in the API's shape: the agent sums it per allocation)
    process_util: dict[int, float] | None = None

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
        by_pid = _process_util(nv, h)
        out.append(GpuSample(
            i, float(util.gpu) if util is not None else None,
            int(mem.used) if mem is not None else None,
            int(mem.total) if mem is not None else None,
            float(temp) if temp is not None else None,
            power / 1000.0 if power is not None else None,
            [{"pid": int(p.pid), "memUsed": _int_or_none(getattr(p, "usedGpuMemory", None))}
             for p in procs] if procs is not None else None,
            _text(name) if name is not None else None,
            by_pid,
        ))
    return out


PROCESS_UTIL_WINDOW = 5.0  # seconds of NVML's per-process samples averaged


def _process_util(nv: Any, handle: Any) -> dict[int, float] | None:
    """Each process's SM utilisation on this GPU, averaged over NVML's samples of the last
    PROCESS_UTIL_WINDOW seconds; {} when NVML has none (no process used the GPU: its
    NotFound), None when it cannot tell (not supported, or an older pynvml)."""
    since = int((time.time() - PROCESS_UTIL_WINDOW) * 1e6)  # NVML's microseconds
    try:
        samples = nv.nvmlDeviceGetProcessUtilization(handle, since)
    except Exception as exc:  # noqa: BLE001 - NVMLError_NotFound and friends
        return {} if "NotFound" in type(exc).__name__ else None
    seen: dict[int, list[float]] = {}
    for sample in samples or ():
        pid, util = getattr(sample, "pid", None), getattr(sample, "smUtil", None)
        if isinstance(pid, int) and isinstance(util, int | float):
            seen.setdefault(pid, []).append(float(util))
    return {pid: sum(values) / len(values) for pid, values in seen.items()}


def allocation_gpu(gpus: list[GpuSample], devices: list[int],
                   pids: set[int]) -> tuple[float | None, int | None]:
    """An allocation's use of its GPUs (`devices`) by its processes (`pids`): the mean over
    its GPUs of their SM utilisation by those processes (percent of a GPU; a GPU NVML cannot
    split by process counts whole when only the allocation's processes use it), and the GPU
    memory they hold. (None, None) without GPUs; None where NVML cannot tell."""
    mine = [g for g in gpus if g.index in set(devices)]
    if not mine:
        return None, None
    memory: int | None = 0
    utils: list[float] = []
    for gpu in mine:
        if gpu.processes is None or memory is None:
            memory = None
        else:
            memory += sum(p["memUsed"] or 0 for p in gpu.processes if p["pid"] in pids)
        util = _gpu_util(gpu, pids)
        if util is not None:
            utils.append(util)
    mean = round(sum(utils) / len(utils), 1) if len(utils) == len(mine) else None
    return mean, memory


def _gpu_util(gpu: GpuSample, pids: set[int]) -> float | None:
    if gpu.process_util is not None:
        return min(100.0, sum(u for pid, u in gpu.process_util.items() if pid in pids))
    listed = {p["pid"] for p in gpu.processes or ()}
    if gpu.processes is not None and listed and listed <= pids:
        return gpu.utilization  # the allocation's processes alone use this GPU
    return 0.0 if gpu.processes == [] else None


def sample_host(gpu_indices: list[int],
                gpus: list[GpuSample] | None = None) -> dict[str, Any]:
    """One telemetry sample of this machine: `{"time", "cpuPercent", "memUsed", "memTotal",
    "gpus": [{"index", "name", "util", "memUsed", "memTotal", "temperature", "power",
    "processes": [{"pid", "memUsed"}] | None}]}`. CPU percent is since the previous call.
    `gpus`: the GPUs' readings when the caller has just taken them."""
    vm = psutil.virtual_memory()
    return {
        "time": time.time(),
        "cpuPercent": psutil.cpu_percent(interval=None),
        "memUsed": int(vm.used),
        "memTotal": int(vm.total),
        "gpus": [s.to_json() for s in (sample_gpus(gpu_indices) if gpus is None else gpus)],
    }


class TreeUsage:
    """The CPU % and RSS of one allocation's processes, sampled repeatedly: CPU from the
    processes' CPU times between two looks (no blocking interval, no scan of /proc: the
    caller names the processes). A process born since the last look counts all its CPU
    time; one that ended since loses its last interval. RSS is summed (pages that forked
    workers share count once per process, as `ps` does)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._at: float | None = None  # the last look: clock, and wall time
        self._wall = 0.0
        self._cpu: dict[int, tuple[float, float]] = {}  # pid -> (create time, CPU seconds)

    def measure(self, procs: list[psutil.Process]) -> dict[str, Any] | None:
        """`{"cpuPercent", "rss"}` since the last call (percent of one core: 250.0 is two
        and a half cores busy); None at the first call (nothing to compare with yet)."""
        now, wall = self._clock(), time.time()
        busy = 0.0
        rss = 0
        seen: dict[int, tuple[float, float]] = {}
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    mem = proc.memory_info().rss
                born = proc.create_time()
            except psutil.Error:
                continue
            spent = times.user + times.system
            before = self._cpu.get(proc.pid)
            if before is not None and before[0] == born:
                busy += max(0.0, spent - before[1])
            elif born >= self._wall:  # born since the last look: all its time is new
                busy += spent
            seen[proc.pid] = (born, spent)
            rss += int(mem)
        last, self._at, self._wall, self._cpu = self._at, now, wall, seen
        if last is None or now <= last:
            return None
        return {"cpuPercent": round(100.0 * busy / (now - last), 1), "rss": rss}


