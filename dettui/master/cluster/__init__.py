"""The master's runtime, split by what each part does, all on the store and the shared `Hub`:
`agents` (registration, heartbeats, work long-polls, liveness), `allocations` (exits, kills,
preemption, searchers' reactions, start-up recovery), `experiments` (pause, cancel, kill,
activate), `scheduling` (the loop that starts allocations) and `slurm` (pools whose allocations
are Slurm jobs). State transitions are store
commands; the parts perform what follows a commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from dettui.errors import NotFound
from dettui.master.cluster.agents import Agents
from dettui.master.cluster.allocations import Allocations
from dettui.master.cluster.experiments import Experiments
from dettui.master.cluster.hub import Hub
from dettui.master.cluster.links import AgentLink
from dettui.master.cluster.scheduling import Scheduling
from dettui.master.cluster.slurm import SlurmProvider
from dettui.master.events import Notifier
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
                 cluster_id: str, mint: Mint) -> None:
        self.hub = Hub(db, settings, notifier, cluster_id, mint)
        self.allocations = Allocations(self.hub)
        self.agents = Agents(self.hub, self.allocations)
        self.experiments = Experiments(self.hub, self.allocations)
        self.scheduling = Scheduling(self.hub, self.allocations)
        self.slurm = {name: SlurmProvider(self.hub, self.allocations, self.agents, pool)
                      for name, pool in settings.slurm.items()}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.allocations.recover()
        self._tasks = [
            asyncio.create_task(self.scheduling.loop(), name="dettui-scheduler"),
            asyncio.create_task(self.agents.liveness_loop(), name="dettui-liveness"),
            asyncio.create_task(self.allocations.backfill(), name="dettui-backfill"),
            *(asyncio.create_task(p.run(), name=f"dettui-slurm-{name}")
              for name, p in self.slurm.items()),
        ]
        self.hub.kick()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.hub.links.wake_all()

    def kick(self) -> None:
        self.hub.kick()

    def advertise(self, url: str) -> None:
        """Where the master listens: Slurm jobs' nodes call it back there."""
        self.hub.url = url

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
        self.hub.draining = True
        live = await self.hub.db.run(trial_store.live_allocations)
        for alloc in live:
            if not alloc.preempt_requested:
                await self.allocations.preempt(alloc.id)
        if live:
            log.info("stopping: %d allocation(s) asked to checkpoint and stop", len(live))
        if not await self._until_idle(timeout):
            for alloc in await self.hub.db.run(trial_store.live_allocations):
                log.warning("stopping: allocation %s did not stop in %.0f s; killing it",
                            alloc.id, timeout)
                if not alloc.kill_requested:
                    await self.allocations.kill(alloc.id, "the master is stopping")
            await self._until_idle(15.0)
        return len(live)

    async def _until_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while await self.hub.db.run(trial_store.live_allocations):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True
