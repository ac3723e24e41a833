"""CPU-heavy work off the event loop (and off the store thread): parsing and validating configs,
decoding and packing contexts, decoding and encoding large JSON.

A small pool of its own, so that a flood of heavy requests queues here instead of starving the
loop, which keeps answering requests and heartbeats meanwhile. Every input that reaches it is
capped first (body size, config size, YAML expansion, grid size), so each job is bounded.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dettui-cpu")


async def cpu(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on a worker thread of the CPU pool."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool, functools.partial(fn, *args, **kwargs))
