"""What each running trial uses, as its agents sample it: in memory, the latest reading and a
short history per agent's part, never written to the database. The trial JSON's `resources`
and the agents' `trialResources` are built here once per sample and read as they are (from
the store's reader threads too: a trial's object is replaced whole, never changed).

Only what an agent reports of its own live allocations is kept: the heartbeat's route hands
over the allocations the store says run on that agent (a hostile agent's numbers for another
agent's allocation are dropped), and the protocol has already bounded every number."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dettui.protocol import AllocationUsage, TelemetrySample

log = logging.getLogger("dettui.master.trial_usage")
HISTORY = 60  # samples kept per part (a minute at the agent's one a second)
STALE = 60.0  # seconds without a sample after which a part no longer counts
MAX_AGE = 300.0  # seconds a sample may be older than its heartbeat's newest (agent's clock)


@dataclass
class Part:
    """One agent's part of a trial's allocation: its samples, newest last."""

    alloc_id: str
    experiment_id: int | None
    cpu: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=HISTORY))
    rss: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=HISTORY))
    gpu_util: float | None = None
    gpu_memory: int | None = None
    sampled_at: float = 0.0  # wall time of the newest sample, by the master's clock
    seen: float = 0.0  # monotonic time the master took it
    agent_time: float = 0.0  # the newest sample's time by the agent's clock (order, repeats)

    def take(self, usage: AllocationUsage, sampled_at: float, agent_time: float) -> None:
        self.cpu.append(round(usage.cpu_percent or 0.0, 1))
        self.rss.append(usage.rss or 0)
        self.gpu_util, self.gpu_memory = usage.gpu_util, usage.gpu_memory
        self.sampled_at, self.agent_time = sampled_at, agent_time


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def resources_json(parts: list[Part]) -> dict[str, Any]:
    """A trial's `resources` from its parts (one per agent): CPU, RSS and GPU memory summed,
    GPU utilisation the mean of the parts' (each a mean over its GPUs), histories summed
    sample by sample from the newest."""
    if len(parts) == 1:  # the common case: one agent runs the trial
        cpu, rss = list(parts[0].cpu), list(parts[0].rss)
    else:
        n = min(len(p.cpu) for p in parts)
        cpu = [round(sum(p.cpu[len(p.cpu) - n + i] for p in parts), 1) for i in range(n)]
        rss = [sum(p.rss[len(p.rss) - n + i] for p in parts) for i in range(n)]
    utils = [p.gpu_util for p in parts]
    memory = [p.gpu_memory for p in parts]
    return {
        "cpuPercent": cpu[-1], "rssBytes": rss[-1],
        "gpuUtil": (round(sum(u for u in utils if u is not None) / len(utils), 1)
                    if None not in utils else None),
        "gpuMemoryBytes": sum(m for m in memory if m is not None) if None not in memory
        else None,
        "history": {"cpuPercent": cpu, "rssBytes": rss},
        "sampledAt": _iso(max(p.sampled_at for p in parts)),
    }


class TrialUsage:
    """Trial id -> its parts (by agent) and its `resources` object. Each heartbeat costs in
    the agent's own trials (an index by agent), not in every trial of the cluster."""

    def __init__(self, monotonic: Any = time.monotonic, wall: Any = time.time) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._parts: dict[int, dict[str, Part]] = {}
        self._of_agent: dict[str, set[int]] = {}  # agent -> trials it has a part of
        self._experiment: dict[int, int] = {}  # trial id -> its experiment's (notifications)
        self._swept = monotonic()
        self.views: dict[int, dict[str, Any]] = {}  # trial id -> `resources` (read-only)
        self.by_agent: dict[str, list[dict[str, Any]]] = {}  # agent -> its parts' objects
        self._warned: set[str] = set()

    def record(self, agent_id: str, live: Mapping[str, int],
               samples: Iterable[TelemetrySample]) -> dict[int, set[int]]:
        """Take an agent's samples (oldest first) for its live allocations (`live`:
        allocation id -> trial id); return the trials whose resources changed, by experiment
        (a trial of an unknown experiment is left out)."""
        samples = list(samples)
        changed: set[int] = set()
        agents = {agent_id}
        newest = max((s.time for s in samples), default=0.0)
        now_wall, now = self._wall(), self._monotonic()
        for sample in samples:
            sampled_at = now_wall - min(max(newest - sample.time, 0.0), MAX_AGE)
            for alloc_id, usage in sample.allocations.items():
                trial_id = live.get(alloc_id)
                if trial_id is None:
                    self._refuse(agent_id, alloc_id)
                    continue
                part = self._part(trial_id, agent_id, alloc_id, agents)
                if sample.time <= part.agent_time and part.cpu:
                    continue  # sent again (a heartbeat that failed)
                part.take(usage, sampled_at, sample.time)
                part.seen = now
                changed.add(trial_id)
        for trial_id in list(self._of_agent.get(agent_id, ())):
            part = self._parts[trial_id][agent_id]
            if part.alloc_id not in live:  # ended (or no longer this agent's)
                self._drop(trial_id, agent_id)
                changed.add(trial_id)
        if now - self._swept > STALE / 4:
            self._swept = now
            changed |= self._sweep(now, agents)
        return self._rebuild(changed, agents)

    def forget_agent(self, agent_id: str) -> dict[int, set[int]]:
        """An agent left or was lost: its parts no longer count."""
        changed = set(self._of_agent.get(agent_id, ()))
        for trial_id in changed:
            self._drop(trial_id, agent_id)
        return self._rebuild(changed, {agent_id})

    def _refuse(self, agent_id: str, alloc_id: str) -> None:
        if agent_id not in self._warned:
            self._warned.add(agent_id)
            log.warning("agent %s reports the usage of allocation %.64r, which is not one of "
                        "its live allocations; ignored", agent_id, alloc_id)

    def _part(self, trial_id: int, agent_id: str, alloc_id: str, agents: set[str]) -> Part:
        parts = self._parts.setdefault(trial_id, {})
        part = parts.get(agent_id)
        if part is None or part.alloc_id != alloc_id:  # a restart: a new allocation
            for other in [a for a, p in parts.items() if p.alloc_id != alloc_id]:
                self._drop(trial_id, other)  # the earlier allocation's parts
                agents.add(other)
            exp = alloc_id.partition(".")[0]  # a task id is "<experiment id>.<request id>"
            part = Part(alloc_id, int(exp) if exp.isdigit() else None)
            self._parts.setdefault(trial_id, {})[agent_id] = part
            self._of_agent.setdefault(agent_id, set()).add(trial_id)
            if part.experiment_id is not None:
                self._experiment[trial_id] = part.experiment_id
        return part

    def _drop(self, trial_id: int, agent_id: str) -> None:
        self._parts.get(trial_id, {}).pop(agent_id, None)
        trials = self._of_agent.get(agent_id)
        if trials is not None:
            trials.discard(trial_id)
            if not trials:
                del self._of_agent[agent_id]

    def _sweep(self, now: float, agents: set[str]) -> set[int]:
        """Parts of agents silent for longer than STALE (lost without a word yet)."""
        dropped = set()
        for trial_id, parts in list(self._parts.items()):
            for other, part in list(parts.items()):
                if now - part.seen > STALE:
                    self._drop(trial_id, other)
                    agents.add(other)
                    dropped.add(trial_id)
        return dropped

    def _rebuild(self, trials: set[int], agents: set[str]) -> dict[int, set[int]]:
        by_exp: dict[int, set[int]] = {}
        for trial_id in trials:
            parts = self._parts.get(trial_id) or {}
            agents.update(parts)
            exp = self._experiment.get(trial_id)
            if parts:
                self.views[trial_id] = resources_json(list(parts.values()))
            else:
                self._parts.pop(trial_id, None)
                self._experiment.pop(trial_id, None)
                self.views.pop(trial_id, None)
            if exp is not None:
                by_exp.setdefault(exp, set()).add(trial_id)
        for agent in agents:
            self._agent_view(agent)
        return by_exp

    def _agent_view(self, agent_id: str) -> None:
        """The agent's parts as the agents' JSON shows them (`trialResources`)."""
        found = []
        for trial_id in sorted(self._of_agent.get(agent_id, ())):
            parts = self._parts[trial_id]
            part = parts[agent_id]
            found.append({"trialId": trial_id, "experimentId": part.experiment_id,
                          "allocationId": part.alloc_id,
                          **(self.views[trial_id] if len(parts) == 1 and trial_id in self.views
                             else resources_json([part]))})
        if found:
            self.by_agent[agent_id] = found
        else:
            self.by_agent.pop(agent_id, None)
