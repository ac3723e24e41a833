"""The one place where what a committed transition leaves to do is done (`Effects`): messages to
agents (starts, kills, parts to end), preemption timers and their long-polls, notifications to
followers, scheduling kicks and checkpoint collection.

Every part of the runtime and every route changes state the same way: `await
dispatcher.run(store_command, ...)`: the command commits one transaction and returns its
effects, which are applied here, after the commit. The rule "a kill that reaches no agent ends
the allocation" lives here (`_kill`). The connected agents (`ConnectedAgents`) are the
dispatcher's delivery targets; the other runtime modules reach them through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from dettui.master import checkpoint_gc, lifecycle
from dettui.master.clock import SYSTEM, Clock
from dettui.master.cluster.connections import AgentLink, ConnectedAgents, kill_message
from dettui.master.cluster.connections import views as agent_views
from dettui.master.effects import Done, Effects, Kill
from dettui.master.notifier import Notifier
from dettui.master.settings import MasterSettings
from dettui.master.start_messages import build_starts
from dettui.master.store import Database, exits
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Agent, Allocation
from dettui.master.tokens import Mint
from dettui.protocol import StartWork

__all__ = ["AgentLink", "ConnectedAgents", "Dispatcher", "agent_views", "kill_message"]
log = logging.getLogger("dettui.master.cluster")
T = TypeVar("T")


class Dispatcher:
    def __init__(self, db: Database, settings: MasterSettings, notifier: Notifier,
                 cluster_id: str, mint: Mint, clock: Clock = SYSTEM) -> None:
        self.db = db
        self.settings = settings
        self.notifier = notifier
        self.cluster_id = cluster_id
        self.mint = mint
        self.clock = clock
        self.agents = ConnectedAgents()
        self.preempting: dict[str, float] = {}  # allocation -> when it was asked (monotonic)
        # allocation -> trial, of those the scheduler started by backfilling (in memory: after
        # a restart they show as plainly scheduled)
        self.backfilled: dict[str, int] = {}
        self.kicked = asyncio.Event()
        self.url: str | None = None  # where the master listens (resource managers' nodes)

    @overload
    async def run(self, command: Callable[..., Done[T]], *args: Any, **kwargs: Any) -> T: ...

    @overload
    async def run(self, command: Callable[..., Effects], *args: Any, **kwargs: Any) -> None: ...

    async def run(self, command: Callable[..., Effects | Done[T]], *args: Any,
                  **kwargs: Any) -> T | None:
        """Run a store command (one transaction), then apply the effects it returns; its value
        when it returns one (`Done`)."""
        result = await self.db.command(command, *args, **kwargs)
        if isinstance(result, Done):
            await self.apply(result.effects)
            return result.value
        if isinstance(result, Effects):
            await self.apply(result)
            return None
        raise TypeError(f"{command.__qualname__} returned {type(result).__name__}: a store "
                        "command returns Effects or Done")

    async def apply(self, effects: Effects) -> None:
        """Perform the effects of a committed transition, in this order: timers forgotten and
        started, messages to agents, notifications, kills (an unreachable one ends its
        allocation, whose own effects follow), a scheduling kick, checkpoint collection."""
        if not effects:
            return
        for line in effects.said:
            log.info("%s", line)
        for alloc_id in effects.exited:
            self.preempting.pop(alloc_id, None)
            self.backfilled.pop(alloc_id, None)
        for part in effects.end_parts:
            if (link := self.agents.get(part.agent_id)) is not None:
                link.send(kill_message(part.alloc_id, part.reason))
        now = self.clock.monotonic()
        for alloc_id in effects.preempted:
            self.preempting.setdefault(alloc_id, now)
            self.notifier.notify(f"preempt:{alloc_id}")
        for note in effects.notes:
            self.notifier.notify(note.topic, ids=note.ids)
        if effects.starts:
            await self._send_starts(list(effects.starts))
        for kill in effects.kills:
            await self._kill(kill)
        if effects.kick:
            self.kick()
        for exp_id in effects.collect:
            await self._collect(exp_id)

    async def _kill(self, kill: Kill) -> None:
        """Tell every connected agent of the kill to end its part; with none left to tell,
        nobody will report the exit: the allocation ends now."""
        reached = False
        for agent_id in kill.agents:
            if (link := self.agents.get(agent_id)) is not None:
                link.send(kill_message(kill.alloc_id, kill.reason))
                reached = True
        if not reached:
            await self.run(exits.end, kill.alloc_id, None, lifecycle.KILLED, "agent gone")

    def kick(self) -> None:
        """Ask for a scheduling pass soon."""
        self.kicked.set()

    def notify(self, *topics: str, ids: Iterable[object] | None = None) -> None:
        """Wake followers of what changed outside the store (agents' liveness, telemetry)."""
        self.notifier.notify(*topics, ids=ids)

    async def _send_starts(self, alloc_ids: list[str]) -> None:
        """The start messages of these allocations (those still live) to their connected
        agents, built from committed records in one store call, then sent."""
        agents = {link.agent.id: link.agent for link in self.agents}
        await self._send(await self.db.call(_start_messages, self.db.conn, alloc_ids, agents,
                                            None, self.cluster_id, self.settings, self.mint))

    async def resend_starts(self, allocs: list[Allocation], agent_id: str) -> None:
        """Starts `agent_id` has not acknowledged (lost with a message or a master): again."""
        if not allocs:
            return
        agents = {link.agent.id: link.agent for link in self.agents}
        await self._send(await self.db.call(_start_messages, self.db.conn,
                                            [a.id for a in allocs], agents, agent_id,
                                            self.cluster_id, self.settings, self.mint))

    async def _send(self, messages: list[tuple[str, StartWork]]) -> None:
        now = self.clock.monotonic()
        for agent_id, message in messages:
            if (link := self.agents.get(agent_id)) is not None:
                link.sent_at[message.allocation_id] = now
                link.send(message)

    def forgive(self, stalled: float) -> None:
        """The master was stalled for `stalled` seconds: heartbeats and exits could not be
        taken in meanwhile, so neither agents' silence nor preemption timeouts count it."""
        now = self.clock.monotonic()
        for link in self.agents:
            link.last_seen = min(now, link.last_seen + stalled)
        for alloc_id in self.preempting:
            self.preempting[alloc_id] += stalled

    async def _collect(self, exp_id: int) -> None:
        """Apply an ended experiment's GC policy, then clear its `gc_pending`."""
        try:
            await checkpoint_gc.collect(self.db, self.run, exp_id)
            await self.run(exits.gc_done, exp_id)
        except Exception:  # noqa: BLE001 - GC failing must not undo the ending
            log.exception("checkpoint GC of experiment %d failed", exp_id)


def _start_messages(conn: Any, alloc_ids: list[str], agents: dict[str, Agent],
                    only: str | None, cluster_id: str, settings: MasterSettings,
                    mint: Mint) -> list[tuple[str, StartWork]]:
    """On the store thread: (agent, start message) of each connected part (`only` that agent's)
    of the live allocations among `alloc_ids`."""
    items = [(alloc, agents[agent_id], {a: agents[a] for a in alloc.agents if a in agents})
             for alloc in trial_store.live_allocations_in(conn, alloc_ids)
             for agent_id in alloc.agents
             if agent_id in agents and (only is None or agent_id == only)]
    messages = build_starts(conn, items, cluster_id, settings, mint)
    return [(agent.id, message) for (_, agent, _), message in zip(items, messages, strict=True)]
