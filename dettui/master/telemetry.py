"""Agents' telemetry as the master keeps it: in memory, the latest reading and a bounded
history for the dashboard's sparklines. Nothing of it goes to SQLite."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dettui.protocol import TelemetrySample

log = logging.getLogger("dettui.master.telemetry")
HISTORY = 120  # samples kept per agent (two minutes at one a second)
CLOCK_JUMP = 60.0  # seconds an agent's clock may go back before its history starts over


@dataclass(frozen=True)
class Point:
    """What the history keeps of one sample."""

    time: float
    cpu: float | None  # percent of the machine
    mem: float | None  # percent of memory used
    gpu_util: dict[str, float | None]  # by GPU index (as a string: a JSON key)


@dataclass(frozen=True)
class Malformed:
    """A sample of a heartbeat that its route could not parse, and why: dropped."""

    problem: str


def point(sample: TelemetrySample) -> Point:
    mem = (round(100.0 * sample.mem_used / sample.mem_total, 1)
           if sample.mem_used is not None and sample.mem_total else None)
    return Point(round(sample.time, 1), _round(sample.cpu_percent), mem,
                 {str(g.index): _round(g.util) for g in sample.gpus})


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


class AgentTelemetry:
    """One agent's latest telemetry sample and its last `keep` samples."""

    def __init__(self, keep: int | None = None) -> None:
        self.latest: dict[str, Any] | None = None
        self.points: collections.deque[Point] = collections.deque(maxlen=keep or HISTORY)
        self._warned = False
        self._json: dict[str, Any] | None = None  # json() until the next sample

    def record(self, samples: Iterable[TelemetrySample | Malformed]) -> None:
        """Take the samples of one heartbeat, oldest first, as its route parsed them. A
        malformed sample is dropped (a heartbeat must never fail for its telemetry), with one
        warning per agent; one already seen is skipped."""
        for sample in samples:
            if isinstance(sample, Malformed):
                if not self._warned:
                    log.warning("dropping malformed telemetry: %s", sample.problem)
                    self._warned = True
                continue
            last = self.points[-1].time if self.points else None
            if last is not None and sample.time <= last:
                if last - sample.time < CLOCK_JUMP:
                    continue
                self.points.clear()  # the agent's clock went back: start over
            self.latest = sample.model_dump(by_alias=True)
            self.latest["allocations"] = {  # as the agent reported them (an older agent: no GPU)
                k: u.model_dump(by_alias=True, exclude_unset=True)
                for k, u in sample.allocations.items()}
            self.points.append(point(sample))
            self._json = None

    def json(self) -> dict[str, Any] | None:
        """The API's `telemetry` object: the latest sample plus `history` arrays (aligned with
        `history.time`; a GPU missing from a sample has null there). Built once per sample
        (the agents list and the dashboards' agents topic read 100 agents' histories several
        times a second) and shared: callers do not change it."""
        if self.latest is None or self._json is not None:
            return self._json
        indices = sorted({i for p in self.points for i in p.gpu_util}, key=_index_order)
        history = {
            "time": [p.time for p in self.points],
            "cpu": [p.cpu for p in self.points],
            "mem": [p.mem for p in self.points],
            "gpuUtil": {i: [p.gpu_util.get(i) for p in self.points] for i in indices},
        }
        self._json = {**self.latest, "history": history}
        return self._json


def _index_order(index: str) -> tuple[int, str]:
    return (int(index), "") if index.isdigit() else (1 << 30, index)
