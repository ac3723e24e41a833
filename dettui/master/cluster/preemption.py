"""Determined's preemption long-poll (`GET /allocations/{id}/signals/preemption`): answered
from the store, woken by the dispatcher when a preemption is committed."""

from __future__ import annotations

from dettui.master.cluster.dispatcher import Dispatcher
from dettui.master.store import trials as trial_store
from dettui.models import AllocationState


class Preemption:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def wait(self, alloc_id: str, timeout: float) -> bool:
        """True at once if the allocation is asked to preempt, else wait up to `timeout`
        seconds for it; False if it exits or the time runs out."""
        clock, db = self.dispatcher.clock, self.dispatcher.db
        deadline = clock.monotonic() + max(0.0, timeout)
        while True:
            alloc = await db.run(trial_store.allocation, alloc_id)
            if alloc.preempt_requested:
                return True
            if alloc.state is AllocationState.EXITED:
                return False
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return False
            await self.dispatcher.notifier.wait(f"preempt:{alloc_id}", remaining)
