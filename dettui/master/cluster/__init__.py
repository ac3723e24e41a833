"""The master's runtime, split by what each part does. Each part changes state by running a
store command through the one `Dispatcher` (dispatcher.py), which performs what the commit
leaves to do (messages to agents, notifications, kicks, checkpoint collection); no part calls
another. `agents` (registration, heartbeats, work long-polls, parts' exits, liveness),
`scheduling` (the loop that starts allocations), `preemption` (the trials' long-poll),
`recovery` (what start-up re-derives) and `slurm` (pools whose allocations are Slurm jobs).
This module composes them; time comes from the clock it is given."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from dettui.errors import NotFound
from dettui.master.clock import SYSTEM, Clock
from dettui.master.cluster import recovery
from dettui.master.cluster.agents import Agents
from dettui.master.cluster.dispatcher import AgentLink, Dispatcher
from dettui.master.cluster.preemption import Preemption
from dettui.master.cluster.scheduling import Scheduling
from dettui.master.cluster.slurm import SlurmProvider
from dettui.master.notifier import Notifier
from dettui.master.settings import MasterSettings
from dettui.master.store import Database
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation
from dettui.master.tokens import Mint
from dettui.protocol import StartWork

__all__ = ["AgentLink", "Cluster"]
log = logging.getLogger("dettui.master.cluster")


class Cluster:
    def __init__(self, db: Database, settings: MasterSettings, notifier: Notifier,
                 cluster_id: str, mint: Mint, clock: Clock = SYSTEM) -> None:
        self.dispatcher = Dispatcher(db, settings, notifier, cluster_id, mint, clock)
        self.agents = Agents(self.dispatcher)
        self.scheduling = Scheduling(self.dispatcher)
        self.preemption = Preemption(self.dispatcher)
        self.slurm = {name: SlurmProvider(self.dispatcher, pool, self.agents.register,
                                          self.agents.heartbeat)
                      for name, pool in settings.slurm.items()}
        for provider in self.slurm.values():
            self.scheduling.holds.append(lambda p=provider: p.held)  # type: ignore[misc]
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def clock(self) -> Clock:
        return self.dispatcher.clock

    async def start(self) -> None:
        await recovery.recover(self.dispatcher)
        self._tasks = [
            asyncio.create_task(self.scheduling.loop(), name="dettui-scheduler"),
            asyncio.create_task(self.agents.liveness_loop(), name="dettui-liveness"),
            asyncio.create_task(recovery.backfill(self.dispatcher), name="dettui-backfill"),
            *(asyncio.create_task(p.run(), name=f"dettui-slurm-{name}")
              for name, p in self.slurm.items()),
        ]
        self.dispatcher.kick()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.dispatcher.agents.wake_all()

    def kick(self) -> None:
        self.dispatcher.kick()

    def advertise(self, url: str) -> None:
        """Where the master listens: Slurm jobs' nodes call it back there."""
        self.dispatcher.url = url

    async def slurm_start(self, alloc: Allocation) -> StartWork:
        """The start message of a Slurm allocation, for the node parts of its job."""
        for provider in self.slurm.values():
            if provider.agent_id in alloc.agents:
                return await provider.start_message(alloc)
        raise NotFound(f"allocation {alloc.id} is not a Slurm job")

    async def drain(self, timeout: float) -> int:
        """Before the master stops on request: no allocation starts any more, every running one
        is asked to checkpoint and stop (preemption, on every agent), and what is still running
        after `timeout` seconds is killed. The trials go back to the queue and resume from
        their checkpoints when a master runs again. Returns how many were running."""
        self.scheduling.stopped = True
        db, run = self.dispatcher.db, self.dispatcher.run
        live = await db.run(trial_store.live_allocations)
        for alloc in live:
            if not alloc.preempt_requested:
                await run(trial_store.request_preempt, alloc.id)
        if live:
            log.info("stopping: %d allocation(s) asked to checkpoint and stop", len(live))
        if not await self._until_idle(timeout):
            for alloc in await db.run(trial_store.live_allocations):
                log.warning("stopping: allocation %s did not stop in %.0f s; killing it",
                            alloc.id, timeout)
                if not alloc.kill_requested:
                    await run(trial_store.request_kill, alloc.id, "the master is stopping")
            await self._until_idle(15.0)
        return len(live)

    async def _until_idle(self, timeout: float) -> bool:
        deadline = self.clock.monotonic() + timeout
        while await self.dispatcher.db.run(trial_store.live_allocations):
            if self.clock.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True


