"""Metric reports from many trials, committed in groups.

Each report is acknowledged only once the transaction holding it has committed, as before; but
the reports that arrive while one group is being written wait and go into the next group
together (one transaction, a savepoint each: `metrics.report_many`), so the store thread does
one commit and one hop of the event loop per group instead of per report. Under light load a
group is one report and nothing waits longer than before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dettui.errors import DettuiError
from dettui.master.store import Database
from dettui.master.store import metrics as metric_store
from dettui.master.store.metrics import MetricReport

MAX_GROUP = 2000  # reports in one transaction


class GroupCommit:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending: list[tuple[MetricReport, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.groups = 0  # transactions written (for tests and benchmarks)

    async def report(self, *reports: MetricReport) -> list[DettuiError | None]:
        """Commit `reports` (in this order, possibly with others'); each one's refusal, if
        any. Returns once all of them are committed or refused."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = [loop.create_future() for _ in reports]
        for fut in futures:  # a request cancelled meanwhile leaves no unretrieved refusal
            fut.add_done_callback(_retrieve)
        self._pending.extend(zip(reports, futures, strict=True))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        results: list[DettuiError | None] = []
        for fut in futures:
            try:
                await fut
                results.append(None)
            except DettuiError as exc:
                results.append(exc)
        return results

    async def _write(self) -> None:
        while self._pending:
            group, self._pending = self._pending[:MAX_GROUP], self._pending[MAX_GROUP:]
            try:
                errors: Sequence[DettuiError | None] = await self.db.run(
                    metric_store.report_many, [r for r, _ in group])
            except BaseException as exc:  # the transaction failed as a whole
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self.groups += 1
            for (_, fut), err in zip(group, errors, strict=True):
                if fut.done():
                    continue
                if err is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(err)


def _retrieve(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
