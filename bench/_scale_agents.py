"""Simulated agents for `bench/scale.py`: N agents x S CPU slots in one asyncio process, speaking
dettui's real agent protocol (`dettui.protocol`, through `dettui.client.Client`) with a
credential each.

Each agent registers, heartbeats every `heartbeat_seconds` the master asks for (with a
telemetry-shaped sample), long-polls its work and "runs" each allocation it is given: it
reports a few metrics with the allocation's own token, sleeps a random short time, then reports
the exit. Kills are honoured (the run ends, the exit is reported as killed). A master restart
is survived the way the real agent survives it: requests are retried, and an agent the master
no longer knows registers again with its running allocations.

Allocations of experiments whose name starts with `hold-` are held (never exit by themselves)
and announced on stdout, so that the benchmark can report metrics with their tokens.

    python bench/_scale_agents.py URL TOKENS_FILE --agents 100 --slots 8 --run 5,30

stdin commands: `freeze` (finished runs wait instead of exiting: the cluster goes still, only
heartbeats go on), `thaw`, `stats`, `stop`. stdout: one JSON object per line (`event`: `held`,
`stats`, `ready`).

What it measures from the outside: "exit -> next start": each acknowledged exit is paired with
the next allocation start any agent receives (first in, first out); while jobs are queued, that
is the time the master takes to record the exit, run a scheduling pass and hand the freed slot
new work over a pending long-poll.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dettui.client import Client
from dettui.errors import DettuiError, Gone, NotFound
from dettui.protocol import (
    AgentSlot,
    AllocationExitBody,
    HeartbeatBody,
    KillWork,
    RegisterAgentBody,
    StartWork,
)

POLL_SECONDS = 30.0
COUNTERS = ("started", "exited", "killed", "reports", "report_errors", "heartbeats", "errors",
            "registrations")
HOLD_PREFIX = "hold-"


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


@dataclass
class Fleet:
    """What every agent of this process shares: settings, the freeze switch, counters."""

    url: str
    slots: int
    run_seconds: tuple[float, float]
    telemetry: bool
    thawed: asyncio.Event = field(default_factory=asyncio.Event)
    started: int = 0
    exited: int = 0
    killed: int = 0
    reports: int = 0
    report_errors: int = 0
    heartbeats: int = 0
    errors: int = 0
    registrations: int = 0
    heartbeat_ms: list[float] = field(default_factory=list)
    exit_ms: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)  # exit acknowledged -> next start
    freed: collections.deque[float] = field(default_factory=collections.deque)
    reported: dict[str, int] = field(default_factory=dict)  # the counters at the last stats()

    def start_seen(self) -> None:
        self.started += 1
        if self.freed:
            self.gaps_ms.append((time.monotonic() - self.freed.popleft()) * 1000)

    def stats(self) -> dict[str, Any]:
        """Everything since the last call: counts and the request times."""
        out = {k: getattr(self, k) - self.reported.get(k, 0) for k in COUNTERS}
        self.reported = {k: getattr(self, k) for k in COUNTERS}
        out.update(heartbeat_ms=self.heartbeat_ms, exit_ms=self.exit_ms, gaps_ms=self.gaps_ms)
        self.heartbeat_ms, self.exit_ms, self.gaps_ms = [], [], []
        return out


class SimAgent:
    def __init__(self, fleet: Fleet, agent_id: str, token: str) -> None:
        self.fleet = fleet
        self.id = agent_id
        self.client = Client(fleet.url, token, timeout=120)
        self.runs: dict[str, asyncio.Task[None]] = {}
        self.heartbeat_seconds = 2.0

    async def run(self) -> None:
        await self.register()
        await asyncio.gather(self.heartbeat_loop(), self.work_loop())

    async def register(self) -> None:
        body = RegisterAgentBody(
            id=self.id, slots=[AgentSlot(id=i, type="cpu", brand="cpu")
                               for i in range(self.fleet.slots)],
            hostname=self.id, addresses=["127.0.0.1"], running_allocations=list(self.runs),
            version="scale-sim", no_gpu_reason="simulated agent")
        while True:
            try:
                registered = await self.client.register_agent(body)
            except DettuiError:
                self.fleet.errors += 1
                await asyncio.sleep(1.0)
                continue
            self.heartbeat_seconds = registered.heartbeat_seconds
            self.fleet.registrations += 1
            return

    def sample(self) -> dict[str, Any] | None:
        if not self.fleet.telemetry:
            return None
        return {"time": time.time(), "cpuPercent": random.uniform(5, 95),
                "memUsed": 20 * 2**30, "memTotal": 64 * 2**30, "gpus": [],
                "allocations": {a: {"cpuPercent": 99.0, "rss": 2**29} for a in self.runs}}

    async def heartbeat_loop(self) -> None:
        await asyncio.sleep(random.uniform(0, self.heartbeat_seconds))  # spread them out
        while True:
            sample = self.sample()
            body = HeartbeatBody(running_allocations=list(self.runs), telemetry=sample,
                                 samples=[sample] if sample else [])
            t0 = time.monotonic()
            try:
                await self.client.agent_heartbeat(self.id, body)
                self.fleet.heartbeats += 1
                self.fleet.heartbeat_ms.append((time.monotonic() - t0) * 1000)
            except (NotFound, Gone):
                await self.register()
            except DettuiError:
                self.fleet.errors += 1
            await asyncio.sleep(self.heartbeat_seconds)

    async def work_loop(self) -> None:
        while True:
            try:
                work = await self.client.agent_work(self.id, POLL_SECONDS)
            except (NotFound, Gone):
                await self.register()
                continue
            except DettuiError:
                self.fleet.errors += 1
                await asyncio.sleep(1.0)
                continue
            for item in work:
                self.handle(item)

    def handle(self, item: StartWork | KillWork) -> None:
        if isinstance(item, KillWork):
            task = self.runs.get(item.allocation_id)
            if task is not None:
                task.cancel()
            return
        if item.allocation_id in self.runs:
            return
        self.fleet.start_seen()
        self.runs[item.allocation_id] = asyncio.create_task(self.run_allocation(item))

    async def run_allocation(self, work: StartWork) -> None:
        config = json.loads(work.env.get("DET_EXPERIMENT_CONFIG", "{}"))
        code: int | None = 0
        reason = "exit"
        try:
            if str(config.get("name", "")).startswith(HOLD_PREFIX):
                emit("held", name=config["name"], allocation_id=work.allocation_id,
                     trial_id=work.trial_id, experiment_id=work.experiment_id,
                     run_id=work.run_id, token=work.session_token,
                     env={**work.env, "DET_MASTER": self.fleet.url})
                await asyncio.Event().wait()  # until killed
            await self.train(work)
            await self.fleet.thawed.wait()
        except asyncio.CancelledError:
            code, reason = None, "killed"
            self.fleet.killed += 1
        await self.report_exit(work.allocation_id, code, reason)

    async def train(self, work: StartWork) -> None:
        """A few metric reports with the allocation's token, spread over its run time."""
        total = random.uniform(*self.fleet.run_seconds)
        for step, group in ((10, "training"), (20, "training"), (20, "validation")):
            await asyncio.sleep(total / 3)
            body = {"metrics": {"trialId": work.trial_id, "trialRunId": work.run_id,
                                "stepsCompleted": step, "group": group,
                                "metrics": {"avgMetrics": {"loss": random.random()}}},
                    "group": group}
            try:
                async with self.client.session.post(
                        f"{self.fleet.url}/api/v1/trials/{work.trial_id}/metrics", json=body,
                        headers={"Grpc-Metadata-x-allocation-token":
                                 f"Bearer {work.session_token}"}) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except (TimeoutError, OSError):
                ok = False
            self.fleet.reports += ok
            self.fleet.report_errors += not ok

    async def report_exit(self, alloc_id: str, code: int | None, reason: str) -> None:
        body = AllocationExitBody(exit_code=code, reason=reason)
        try:
            while True:
                t0 = time.monotonic()
                try:
                    await self.client.allocation_exit(self.id, alloc_id, body)
                except NotFound:
                    break  # the master ended it already
                except DettuiError:
                    self.fleet.errors += 1
                    await asyncio.sleep(1.0)
                    continue
                now = time.monotonic()
                self.fleet.exit_ms.append((now - t0) * 1000)
                self.fleet.exited += 1
                if code == 0:
                    self.fleet.freed.append(now)
                break
        finally:
            self.runs.pop(alloc_id, None)


async def commands(fleet: Fleet, agents: list[SimAgent]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        if line == "freeze":
            fleet.thawed.clear()
            fleet.freed.clear()  # no starts follow these: not a scheduling gap
        elif line == "thaw":
            fleet.thawed.set()
        elif line == "stats":
            emit("stats", **fleet.stats(),
                 running=sum(len(a.runs) for a in agents))
        elif line == "stop":
            break


async def main_async(args: argparse.Namespace) -> None:
    lo, hi = (float(x) for x in args.run.split(","))
    fleet = Fleet(args.url, args.slots, (lo, hi), not args.no_telemetry)
    fleet.thawed.set()
    tokens = json.loads(Path(args.tokens).read_text())
    agents = [SimAgent(fleet, f"sim-{i:03d}", tokens[i]) for i in range(args.agents)]
    await asyncio.gather(*(a.register() for a in agents))
    emit("ready", agents=len(agents))
    tasks = [asyncio.create_task(a.run()) for a in agents]
    try:
        await commands(fleet, agents)
    finally:
        for t in tasks:
            t.cancel()
        for a in agents:
            for run in a.runs.values():
                run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        for a in agents:
            await a.client.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("tokens", help="a JSON file: a list of agent credentials, one per agent")
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--run", default="5,30", help="seconds an allocation runs: MIN,MAX")
    p.add_argument("--no-telemetry", action="store_true")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
