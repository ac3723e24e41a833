"""Waiting in tests: poll a check until it holds, or fail naming what was awaited.

    until(lambda: path.exists(), "the trial's marker file", timeout=60)
    state = await until_async(lambda: trial_state(api), "the trial to end",
                              done=lambda s: s in TERMINAL)

`check` is called until `done(value)` is true (by default: until the value is truthy), and
the value is returned. The first polls come quickly (10 ms) and the interval doubles up to
`most`, so a fast condition costs little and a slow one does not spin. On timeout the
AssertionError names `what` and shows the last value seen. `until_async` also awaits what
`check` returns when it is awaitable, so `check` may be a coroutine function.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

FIRST = 0.01
SHOWN = 3000  # characters of the last value a timeout shows


def _intervals(most: float) -> Iterator[float]:
    step = min(FIRST, most)
    while True:
        yield step
        step = min(step * 2, most)


def _timed_out(what: str | Callable[[], str], timeout: float, seen: object) -> AssertionError:
    name = what() if callable(what) else what
    multiline = isinstance(seen, str) and "\n" in seen  # a screen, a log: shown as it reads
    shown = "\n" + seen if multiline else repr(seen)  # type: ignore[operator]
    if len(shown) > SHOWN:
        shown = shown[:SHOWN] + "…"
    return AssertionError(f"timed out after {timeout:g} s waiting for {name}; last seen: {shown}")


def until(check: Callable[[], T], what: str | Callable[[], str], *, timeout: float = 30,
          done: Callable[[T], object] = bool, most: float = 0.2) -> T:
    """Call `check` until `done` holds for its value; return that value.

    `what` (or a function giving it, called only on timeout) names what is awaited."""
    deadline = time.monotonic() + timeout
    for pause in _intervals(most):
        seen = check()
        if done(seen):
            return seen
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, seen)
        time.sleep(pause)
    raise AssertionError("unreachable")


async def until_async(check: Callable[[], T | Awaitable[T]], what: str | Callable[[], str], *,
                      timeout: float = 30, done: Callable[[T], object] = bool,
                      most: float = 0.2) -> T:
    """`until` for the event loop: sleeps with asyncio, awaits `check`'s value if need be."""
    deadline = time.monotonic() + timeout
    for pause in _intervals(most):
        value = check()
        seen: T = await value if inspect.isawaitable(value) else value  # type: ignore[assignment]
        if done(seen):
            return seen
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, seen)
        await asyncio.sleep(pause)
    raise AssertionError("unreachable")
