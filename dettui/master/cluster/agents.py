"""Agents: registration, heartbeats, the work long-poll, and liveness (an agent silent for
longer than the agent timeout is gone, and its allocations with it; the master's own stalls do
not count as the agent's silence)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from dettui.errors import PermissionDenied
from dettui.master.cluster.allocations import Allocations
from dettui.master.cluster.hub import Hub
from dettui.master.cluster.links import AgentLink, kill_message
from dettui.master.store import agents as agent_store
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from dettui.master.store.records import Agent
from dettui.models import AllocationState
from dettui.protocol import KillWork, StartWork

log = logging.getLogger("dettui.master.cluster")
RESEND_AFTER = 10.0  # seconds an agent may sit on a start before it is sent again
LOST_CHECK_EVERY = 30.0  # seconds between looks for detached trials that stopped heartbeating
STALL_SLACK = 0.25  # seconds of lateness of the liveness tick that count as a master stall


def _nothing(conn: object) -> None:
    """A no-op store call: how long it waits is how long the store thread was busy."""


class Agents:
    def __init__(self, hub: Hub, allocations: Allocations) -> None:
        self.hub = hub
        self.db = hub.db
        self.allocations = allocations
        self.started = time.monotonic()
        self._lost_checked = time.monotonic()

    def pool_of(self, agent_id: str) -> str | None:
        """The resource pool of a connected agent."""
        link = self.hub.links.get(agent_id)
        return link.agent.pool if link is not None else None

    def connected(self) -> list[AgentLink]:
        return sorted(self.hub.links, key=lambda link: link.agent.id)

    def pools(self) -> set[str]:
        """The resource pools of the connected agents (asked by every creation: no sort)."""
        return {link.agent.pool for link in self.hub.links}

    async def register(
        self, agent_id: str, pool: str, slots: list[dict[str, Any]], hostname: str,
        addresses: list[str], running: list[str], no_gpu_reason: str | None = None,
        cred_id: int | None = None, sandbox: str = "",
    ) -> Agent:
        """An agent joins (or joins again); `cred_id` is the credential it registers with,
        bound to `agent_id` in the same transaction (None: a pool the master runs itself)."""
        if cred_id is not None and agent_id in self.master_ids():
            raise PermissionDenied(f"agent id {agent_id} belongs to the master's Slurm pool")
        agent = await self.db.run(agent_store.register, cred_id, agent_id, pool, slots,
                                  hostname, addresses)
        link = AgentLink(agent, time.monotonic(), no_gpu_reason=no_gpu_reason,
                         sandbox=sandbox[:200])
        self.hub.links.put(link)
        await self._reconcile(link, set(running), registering=True)
        self.hub.notify("agents")
        self.hub.kick()
        return agent

    def master_ids(self) -> set[str]:
        """The agent ids of the pools the master runs itself (`SlurmProvider.agent_id`)."""
        return {f"slurm-{pool}" for pool in self.hub.settings.slurm}

    async def heartbeat(
        self, agent_id: str, running: list[str], telemetry: dict[str, Any] | None,
        samples: list[Any] | None = None,
    ) -> None:
        """The agent is alive; keep its telemetry (`samples` since the last heartbeat, else
        the latest `telemetry`; malformed ones are dropped)."""
        link = self.hub.links.require(agent_id)
        link.last_seen = time.monotonic()
        link.telemetry.record(samples or ([telemetry] if telemetry else []))
        self.hub.notify("agents")
        await self._reconcile(link, set(running), registering=False)

    async def set_enabled(self, agent_id: str, enabled: bool, drain: bool = False) -> Agent:
        """Enable: the agent takes work again. Disable: no new work; as in Determined, its
        running trials are killed (and rescheduled) unless `drain` lets them finish."""
        link = self.hub.links.require(agent_id)
        link.agent = await self.db.run(agent_store.set_enabled, agent_id, enabled, drain)
        if not enabled and not drain:
            for alloc in await self.db.run(trial_store.live_allocations):
                if agent_id in alloc.agents and agent_id not in alloc.part_exits:
                    await self.allocations.lose(alloc, f"agent {agent_id} disabled")
        self.hub.notify("agents")
        self.hub.kick()
        return link.agent

    async def set_slot_enabled(self, agent_id: str, slot_id: int, enabled: bool) -> Agent:
        link = self.hub.links.require(agent_id)
        link.agent = await self.db.run(agent_store.set_slot_enabled, agent_id, slot_id, enabled)
        self.hub.notify("agents")
        self.hub.kick()
        return link.agent

    def drain(self, agent_id: str) -> None:
        self.hub.links.require(agent_id).draining = True
        self.hub.notify("agents")

    async def leave(self, agent_id: str) -> None:
        """An agent that stops says so: its slots leave the pool at once."""
        if self.hub.links.drop(agent_id) is None:
            return
        await self.allocations.lose_agent(agent_id, f"agent {agent_id} left")
        self.hub.notify("agents")
        self.hub.kick()

    async def _reconcile(self, link: AgentLink, running: set[str], registering: bool) -> None:
        """Compare what the agent runs with what the store says it should run, and re-derive
        what a crash of the master (or a lost message) left undone: kills committed and not
        delivered are resent at registration, starts not acknowledged are resent, ASSIGNED
        allocations it runs become RUNNING, those it lost end, those the store does not know
        as live are killed. (The rest of recovery is `Allocations.recover`'s.)"""
        me = link.agent.id
        live = {a.id: a for a in await self.db.run(trial_store.live_allocations_of, me)
                if me not in a.part_exits}
        link.running = running
        unknown = running - live.keys()
        if unknown:  # but those whose exit it reported since it listed them
            unknown -= await self.db.run(trial_store.exits_reported, me, sorted(unknown))
            await self._note_foreign(me, unknown)
        for alloc_id in sorted(unknown):  # its copies only: another agent's part runs on
            link.send(kill_message(alloc_id, "unknown allocation"))
        now = time.monotonic()
        assigned, resend = [], []
        for alloc in live.values():
            if alloc.id in running:
                if registering and (alloc.kill_requested or
                                    alloc.state is AllocationState.TERMINATING):
                    link.send(kill_message(alloc.id, "killed"))  # lost with an earlier master?
                elif alloc.state is AllocationState.ASSIGNED:
                    assigned.append(alloc.id)
                continue
            if registering and alloc.state is not AllocationState.ASSIGNED:
                await self.allocations.lose(alloc, "agent restarted without it")
            elif now - link.sent_at.get(alloc.id, 0.0) > RESEND_AFTER:
                resend.append((link, alloc))
        if assigned:
            for alloc_id in await self.db.run(trial_store.mark_running, *assigned):
                self.hub.notify(f"trial:{live[alloc_id].trial_id}")  # its allocation runs now
        await self.hub.send_starts(resend)

    async def _note_foreign(self, me: str, listed: set[str]) -> None:
        """A log line for allocations an agent lists that live on other agents only: a
        confused or hostile agent, never acted on beyond killing its own copies."""
        if not listed:
            return
        foreign = sorted(a.id for a in await self.db.run(trial_store.live_allocations)
                         if a.id in listed and me not in a.agents)
        if foreign:
            log.warning("agent %s lists allocation(s) %s that run on other agents only; "
                        "ignored (it is told to kill its copies)", me, ", ".join(foreign[:10]))

    async def poll_work(self, agent_id: str, timeout: float) -> list[StartWork | KillWork]:
        link = self.hub.links.require(agent_id)
        link.last_seen = time.monotonic()
        if not link.outbox:
            link.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.wake.wait(), timeout)
        if self.hub.links.get(agent_id) is not link:
            return []
        work, link.outbox = link.outbox, []
        return work

    # --- liveness ----------------------------------------------------------------------

    async def liveness_loop(self) -> None:
        interval = min(1.0, self.hub.settings.agent_timeout / 4)
        while True:
            started = time.monotonic()
            await asyncio.sleep(interval)
            try:
                await self.db.run(_nothing)  # waits behind whatever holds the store thread
                self._forgive(time.monotonic() - started - interval)
                await self._check()
            except Exception:  # noqa: BLE001 - keep the loop alive, report the bug
                log.exception("liveness check failed")

    def _forgive(self, stalled: float) -> None:
        """Silence is measured with the master's own stalls taken out: while the event loop or
        the store thread was stuck, heartbeats could not be taken in, so an agent is not blamed
        for them (a slow master must never declare healthy agents lost)."""
        if stalled < STALL_SLACK:
            return
        log.warning("the master was stalled for %.1f s; agents' silence during it is forgiven",
                    stalled)
        now = time.monotonic()
        for link in self.hub.links:
            link.last_seen = min(now, link.last_seen + stalled)
        for alloc_id in self.hub.preempting:
            self.hub.preempting[alloc_id] += stalled

    async def _check(self) -> None:
        now = time.monotonic()
        for link in self.hub.links:
            if now - link.last_seen > self.hub.settings.agent_timeout:
                log.warning("agent %s missed its heartbeats; its allocations are lost",
                            link.agent.id)
                self.hub.links.drop(link.agent.id, lost="silent for more than "
                                    f"{self.hub.settings.agent_timeout:g} s")
                self.hub.notify("agents")
        await self.allocations.enforce_preemption_timeouts(now)
        if now - self._lost_checked > LOST_CHECK_EVERY:
            self._lost_checked = now
            await self.allocations.settle_unmanaged(await self.db.run(
                unmanaged_store.mark_lost, time.time() - unmanaged_store.LOST_AFTER))
        if now - self.started < self.hub.settings.agent_timeout:
            return  # agents of the master before a restart have this long to come back
        for alloc in await self.db.run(trial_store.live_allocations):
            gone = [a for a in alloc.agents
                    if a not in self.hub.links and a not in alloc.part_exits]
            if gone:
                await self.allocations.lose(alloc, f"agent {gone[0]} is gone")
