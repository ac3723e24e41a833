"""Python's cycle collector, kept off the request path.

A full collection walks every tracked object with the GIL held: the event loop, the store thread
and every other thread wait for it. At lab scale the master's heap holds ~400,000 long-lived
objects (the kept queue, the live allocations, the stream's readers), a full collection took
~200 ms there, and CPython started one every few seconds while metrics poured in: 272 in the six
minutes of a bench run's creation and seeding (46 s in all), each freeing nothing or next to
nothing, and each a stall every request in flight waited out.

So while a master runs, the young generations are collected as CPython does by itself (they
are small), and the old one on a timer instead: every FULL_EVERY seconds. Garbage in cycles that
lived long enough to reach the old generation waits that long at most; the rest of the memory is
freed by reference counting as ever.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

log = logging.getLogger("dettui.master")
FULL_EVERY = 600.0  # seconds between full collections
NEVER = 2**31 - 1  # an old-generation threshold CPython never reaches
_entered: list[tuple[int, int, int]] = []  # per master running: the thresholds found at start


@asynccontextmanager
async def old_generation_on_a_timer(every: float = FULL_EVERY) -> AsyncIterator[None]:
    """While entered (masters in one process share it): no automatic full collection, one
    every `every` seconds instead; the thresholds found are put back when the last leaves."""
    before = _entered[0] if _entered else gc.get_threshold()
    _entered.append(before)
    gc.set_threshold(before[0], before[1], NEVER)
    task = asyncio.create_task(_collect_every(every))
    try:
        yield
    finally:
        task.cancel()
        _entered.pop()
        if not _entered:
            gc.set_threshold(*before)


async def _collect_every(every: float) -> None:
    while True:
        await asyncio.sleep(every)
        started = time.perf_counter()
        found = gc.collect()
        log.debug("full garbage collection: %d objects freed in %.0f ms", found,
                  (time.perf_counter() - started) * 1000)
