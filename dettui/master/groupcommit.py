"""Writes from many requests, committed in groups: metric reports from many trials, experiments
from many users.

Each item is acknowledged only once the transaction holding it has committed, as before; but
the items that arrive while one group is being written wait and go into the next group
together (one transaction: `metrics.report_many`, a savepoint each; `experiments.create_many`),
so the store thread does one commit and one hop of the event loop per group instead of per
item. Under light load a group is one item and nothing waits longer than before.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from dettui.errors import DettuiError

I = TypeVar("I")  # noqa: E741 - an item to write
R = TypeVar("R")  # what writing it gave

Write = Callable[[sqlite3.Connection, list[I]], Any]  # a store command: Done[list[R | error]]


class Runner(Protocol):
    """What runs a store command and performs its effects (`cluster.Dispatcher`)."""

    async def run(self, command: Callable[..., Any], *args: Any) -> Any: ...


class GroupCommit(Generic[I, R]):
    """Items written by the store command `write(conn, items)`, run by the dispatcher (which
    performs its effects once committed), a group of up to `most` in one
    transaction (and, with `size`, of at most `most_bytes` but for its first item: a group of
    95 MiB contexts would hold the store thread for seconds); `write` gives each item's
    result, or its refusal (a `DettuiError`, the others written all the same)."""

    def __init__(self, dispatcher: Runner, write: Write[I, R], most: int,
                 size: Callable[[I], int] | None = None, most_bytes: int = 0) -> None:
        self.dispatcher = dispatcher
        self.write = write
        self.most = most
        self.size = size
        self.most_bytes = most_bytes
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.groups = 0  # transactions written (for tests and benchmarks)

    async def one(self, item: I) -> R:
        """Write `item` (with others', perhaps); its result, or its refusal raised."""
        return await self._submit([item])[0]

    async def submit(self, *items: I) -> list[R | DettuiError]:
        """Write `items` (in this order, possibly with others'); each one's result or refusal.
        Returns once all of them are committed or refused."""
        results: list[R | DettuiError] = []
        for fut in self._submit(list(items)):
            try:
                results.append(await fut)
            except DettuiError as exc:
                results.append(exc)
        return results

    def _submit(self, items: list[I]) -> list[asyncio.Future[R]]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[R]] = [loop.create_future() for _ in items]
        for fut in futures:  # a request cancelled meanwhile leaves no unretrieved refusal
            fut.add_done_callback(_retrieve)
        self._pending.extend(zip(items, futures, strict=True))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return futures

    def _next_group(self) -> list[tuple[I, asyncio.Future[R]]]:
        n = min(self.most, len(self._pending))
        if self.size is not None:
            total = 0
            for i, (item, _) in enumerate(self._pending[:n]):
                total += self.size(item)
                if i and total > self.most_bytes:
                    n = i
                    break
        group, self._pending = self._pending[:n], self._pending[n:]
        return group

    async def _write(self) -> None:
        while self._pending:
            group = self._next_group()
            try:
                results: Sequence[Any] = await self.dispatcher.run(self.write,
                                                                   [i for i, _ in group])
            except BaseException as exc:  # the transaction failed as a whole
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self.groups += 1
            for (_, fut), result in zip(group, results, strict=True):
                if fut.done():
                    continue
                if isinstance(result, DettuiError):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
