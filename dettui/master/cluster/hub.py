"""What every part of the cluster shares: the store, the settings, the connected agents, and the
side effects that follow a commit (notifications, a scheduling pass, start messages, preemption
timers, checkpoint collection). Each effect is idempotent."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from dettui.master import checkpoint_gc
from dettui.master.cluster.links import AgentLink, Links
from dettui.master.events import Notifier
from dettui.master.launch_spec import build_starts
from dettui.master.settings import MasterSettings
from dettui.master.store import Database, exits
from dettui.master.store.records import Allocation
from dettui.master.tokens import Mint

log = logging.getLogger("dettui.master.cluster")


@dataclass
class Hub:
    db: Database
    settings: MasterSettings
    notifier: Notifier
    cluster_id: str
    mint: Mint
    links: Links = field(default_factory=Links)
    preempting: dict[str, float] = field(default_factory=dict)  # allocation -> when (monotonic)
    backfilled: dict[str, int] = field(default_factory=dict)  # allocation -> trial, of those
    # started by backfilling (in memory: after a restart they show as plainly scheduled)
    unschedulable: dict[int, str] = field(default_factory=dict)  # trial -> why it waits
    held: dict[int, str] = field(default_factory=dict)  # trial -> why its Slurm job pends
    url: str | None = None  # where the master listens (for resource managers' nodes)
    kicked: asyncio.Event = field(default_factory=asyncio.Event)
    draining: bool = False  # the master is stopping: no allocation starts any more

    def kick(self) -> None:
        """Ask for a scheduling pass soon."""
        self.kicked.set()

    def notify(self, *topics: str) -> None:
        self.notifier.notify(*topics)

    def experiment_changed(self, exp_id: int, *trial_ids: int, jobs: bool = False) -> None:
        self.notifier.experiment_changed(exp_id, *trial_ids, jobs=jobs)

    def preempted(self, alloc_id: str) -> None:
        """After `preempt_requested` is committed: time the preemption, wake the long-poll."""
        self.preempting.setdefault(alloc_id, time.monotonic())
        self.notify(f"preempt:{alloc_id}")

    async def send_start(self, link: AgentLink, alloc: Allocation) -> None:
        """The start message of `link`'s part of `alloc`, built from committed records."""
        await self.send_starts([(link, alloc)])

    async def send_starts(self, parts: list[tuple[AgentLink, Allocation]]) -> None:
        """The start messages of these (link, allocation) parts, built from committed records
        in one store call, then sent."""
        if not parts:
            return
        items = [(alloc, link.agent, {a: peer.agent for a in alloc.agents
                                      if (peer := self.links.get(a))})
                 for link, alloc in parts]
        messages = await self.db.call(build_starts, self.db.conn, items, self.cluster_id,
                                      self.settings, self.mint)
        now = time.monotonic()
        for (link, alloc), message in zip(parts, messages, strict=True):
            link.sent_at[alloc.id] = now
            link.send(message)

    async def collect(self, exp_id: int) -> None:
        """Apply an ended experiment's GC policy, then clear its `gc_pending`."""
        try:
            await checkpoint_gc.collect(self.db, exp_id)
            await self.db.run(exits.gc_done, exp_id)
        except Exception:  # noqa: BLE001 - GC failing must not undo the ending
            log.exception("checkpoint GC of experiment %d failed", exp_id)
