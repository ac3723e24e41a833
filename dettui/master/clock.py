"""Time for the master's runtime, passed in: liveness, preemption timeouts and the gaps between
scheduling passes read it, so tests drive time instead of sleeping (`ManualClock`)."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep(self, seconds: float) -> float:
        """Sleep `seconds` of this clock; how many real seconds late it woke (the event loop
        was stuck: the master's own stall)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> float:
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        return max(0.0, time.perf_counter() - started - seconds)


class ManualClock:
    """A clock that moves only when told (`advance`): sleepers wake when their time comes.
    Starts at the system's time, so records it stamps read as today."""

    def __init__(self) -> None:
        self._now = 0.0
        self._wall0 = time.time()
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall0 + self._now

    async def sleep(self, seconds: float) -> float:
        """Wakes when `advance` reaches its time, never late."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return 0.0
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + seconds, fut))
        try:
            await fut
        finally:
            self._sleepers = [(t, f) for t, f in self._sleepers if f is not fut]
        return 0.0

    async def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, waking every sleeper whose time has come (in order),
        and let each run until it waits again."""
        target = self._now + seconds
        while True:
            due = sorted((t, i) for i, (t, f) in enumerate(self._sleepers)
                         if t <= target and not f.done())
            if not due:
                break
            when, i = due[0]
            self._now = max(self._now, when)
            self._sleepers[i][1].set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)


SYSTEM = SystemClock()
