"""Retrying with exponential backoff: the one helper for every loop that waits out a master or a
network that is away for a while (the agent, the Core API, the CLI)."""

from __future__ import annotations

import time
from collections.abc import Iterator


def delays(first: float = 0.2, cap: float = 5.0, give_up_after: float | None = None,
           factor: float = 2.0) -> Iterator[float]:
    """Seconds to wait before each next attempt: `first`, doubling up to `cap`; the iterator
    ends once `give_up_after` seconds have passed since it started (never, if None)."""
    started = time.monotonic()
    delay = first
    while give_up_after is None or time.monotonic() - started + delay <= give_up_after:
        yield delay
        delay = min(delay * factor, cap)
