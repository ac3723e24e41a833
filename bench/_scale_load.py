"""The load `bench/scale.py` puts on the master and what it times: experiment creation, API
calls per endpoint, CLI commands, metric ingest over REST."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from dettui import context

TRAIN_PY = "from dettui import core\n\nwith core.init() as ctx:\n    pass\n"


def experiment_config(name: str, trials: int, searcher: str = "random") -> str:
    """A random search whose trials are all created at once (max_concurrent_trials = trials),
    one slot each."""
    return (f"name: {name}\nentrypoint: python3 train.py\nresources:\n  slots_per_trial: 1\n"
            f"searcher:\n  name: {searcher}\n  metric: loss\n  max_trials: {trials}\n"
            f"  max_concurrent_trials: {trials}\n  max_length:\n    batches: 100\n"
            "hyperparameters:\n  lr:\n    type: double\n    minval: 0.0001\n    maxval: 0.1\n"
            "max_restarts: 0\n")


def context_files(extra_bytes: int = 0) -> list[dict[str, Any]]:
    """The v1File list (`dettui.context.pack`) of a tiny context; `extra_bytes` of random data
    added as a second file (incompressible, so the stored context is that big)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "train.py").write_text(TRAIN_PY)
        if extra_bytes:
            (Path(tmp) / "weights.bin").write_bytes(os.urandom(extra_bytes))
        return context.pack(Path(tmp))


def percentiles(values: list[float]) -> tuple[float, float]:
    """p50 and p99 (nearest rank) of `values`."""
    if not values:
        return float("nan"), float("nan")
    s = sorted(values)
    return statistics.median(s), s[min(len(s) - 1, max(0, round(0.99 * len(s)) - 1))]


class Api:
    """An aiohttp session with a user's token; every call checked and timed."""

    def __init__(self, url: str, token: str, connections: int = 64) -> None:
        self.url = url
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            connector=aiohttp.TCPConnector(limit=connections),
            timeout=aiohttp.ClientTimeout(total=600))

    async def close(self) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, body: Any = None,
                   params: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                   timeout: float | None = None) -> tuple[float, Any]:
        """(seconds, decoded answer); raises RuntimeError on an HTTP error."""
        data = body if isinstance(body, str | bytes) or body is None else json.dumps(body)
        t0 = time.perf_counter()
        async with self.session.request(
                method, self.url + path, data=data, params=params, headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None) as resp:
            raw = await resp.read()
            seconds = time.perf_counter() - t0
            if resp.status != 200:
                raise RuntimeError(f"{method} {path} -> HTTP {resp.status}: {raw[:300]!r}")
        return seconds, json.loads(raw) if raw else {}


@dataclass
class Created:
    ids: list[int] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)  # perf_counter of each answer
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    start: float = 0.0  # perf_counter when the first request went out

    def block_rates(self, block: int) -> list[float]:
        """Experiments/s of each block of `block` creations, by completion time."""
        t = sorted(self.done_at)
        edges = [self.start, *t[block - 1::block]]
        return [block / (b - a) for a, b in zip(edges, edges[1:], strict=False) if b > a]


async def create_experiments(api: Api, names: list[str], trials: int, concurrency: int,
                             files: list[dict[str, Any]] | None = None,
                             budget: float = float("inf")) -> Created:
    """Create experiments named `names` with `concurrency` requests in flight; no new request
    after `budget` seconds (`Created.ids` tells how many were made)."""
    out = Created()
    files_json = json.dumps(files if files is not None else context_files())
    todo = iter(names)
    deadline = time.perf_counter() + budget

    async def worker() -> None:
        for name in todo:
            if time.perf_counter() > deadline:
                return
            body = ('{"activate": true, "config": ' + json.dumps(experiment_config(name, trials))
                    + ', "modelDefinition": ' + files_json + "}")
            try:
                _, answer = await api.call("POST", "/api/v1/experiments", body,
                                           headers={"Content-Type": "application/json"})
            except (RuntimeError, aiohttp.ClientError, TimeoutError) as exc:
                out.failures.append(f"{name}: {exc}")
                continue
            out.ids.append(int(answer["experiment"]["id"]))
            out.done_at.append(time.perf_counter())

    out.start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out.seconds = time.perf_counter() - out.start
    return out


@dataclass
class Timing:
    """Wall times of one endpoint (or command), seconds."""

    name: str
    times: list[float] = field(default_factory=list)
    error: str | None = None
    bytes: int = 0

    @property
    def p50(self) -> float:
        return percentiles(self.times)[0]

    @property
    def p99(self) -> float:
        return percentiles(self.times)[1]


async def time_endpoint(api: Api, name: str, path: str, params: dict[str, str] | None,
                        samples: int, budget: float) -> Timing:
    """`samples` sequential GETs (one warm-up first), stopping early after `budget` seconds."""
    return (await time_turns(api, [(name, path, params)], samples, budget))[0]


async def time_turns(api: Api, endpoints: list[tuple[str, str, dict[str, str] | None]],
                     samples: int, budget: float) -> list[Timing]:
    """Endpoints (name, path, params) timed in turns, a GET of each in a round, `samples`
    rounds after one warm-up round, stopping early after `budget` seconds: endpoints timed
    together meet the same load (a comparison of them is not one of two moments)."""
    out = [Timing(name) for name, _, _ in endpoints]
    deadline = time.perf_counter() + budget
    try:
        for timing, (_, path, params) in zip(out, endpoints, strict=True):
            _, answer = await api.call("GET", path, params=params, timeout=120)
            timing.bytes = len(json.dumps(answer))
        for _ in range(samples):
            for timing, (_, path, params) in zip(out, endpoints, strict=True):
                seconds, _ = await api.call("GET", path, params=params, timeout=120)
                timing.times.append(seconds)
            if time.perf_counter() > deadline:
                break
    except (RuntimeError, aiohttp.ClientError, TimeoutError) as exc:
        for timing in out:
            timing.error = f"{type(exc).__name__}: {exc}"[:300]
    return out


def time_command(name: str, args: list[str], env: dict[str, str], runs: int) -> Timing:
    out = Timing(name)
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        out.times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            out.error = done.stderr.strip()[-300:]
            break
        out.bytes = len(done.stdout)
    return out


def metric_report(trial_id: int, run_id: int, step: int, keys: int) -> dict[str, Any]:
    """One report of `keys` metrics (ReportMetricsBody)."""
    return {"group": "training", "metrics": {
        "trialId": trial_id, "trialRunId": run_id, "stepsCompleted": step,
        "metrics": {"avgMetrics": {f"m{k:03d}": step * 1e-3 + k for k in range(keys)}}}}


@dataclass
class Ingest:
    name: str
    metrics: int
    requests: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.metrics / self.seconds


async def ingest_rest(api: Api, held: dict[str, Any], name: str, metrics: int, keys: int,
                      per_request: int) -> Ingest:
    """Metrics over REST from one client, requests one after another: `per_request` reports of
    `keys` metrics each, to /metrics/batch when per_request > 1, else to /metrics."""
    trial, run, token = int(held["trial_id"]), int(held["run_id"]), str(held["token"])
    headers = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}",
               "Content-Type": "application/json"}
    requests = max(metrics // (keys * per_request), 1)
    step = 0
    t0 = time.perf_counter()
    for _ in range(requests):
        reports = []
        for _ in range(per_request):
            step += 1
            reports.append(metric_report(trial, run, step, keys))
        if per_request == 1:
            await api.call("POST", f"/api/v1/trials/{trial}/metrics", reports[0],
                           headers=headers)
        else:
            _, answer = await api.call("POST", f"/api/v1/trials/{trial}/metrics/batch",
                                       {"reports": reports}, headers=headers)
            if answer.get("refused"):
                raise RuntimeError(f"{name}: reports refused: {answer['refused'][:2]}")
    return Ingest(name, requests * per_request * keys, requests, time.perf_counter() - t0)
