"""Agents: registration, heartbeats, the work long-poll, their parts' exits, and liveness (an
agent silent for longer than the agent timeout is gone, and its allocations with it; the
master's own stalls do not count as the agent's silence). State changes are store commands run
by the dispatcher; time is the dispatcher's clock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from dettui.errors import PermissionDenied
from dettui.master.cluster.dispatcher import AgentLink, Dispatcher, kill_message
from dettui.master.store import agents as agent_store
from dettui.master.store import exits
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from dettui.master.store.records import Agent, Allocation
from dettui.master.trial_usage import TrialUsage
from dettui.models import AllocationState
from dettui.protocol import KillWork, StartWork, TelemetrySample

log = logging.getLogger("dettui.master.cluster")
RESEND_AFTER = 10.0  # seconds an agent may sit on a start before it is sent again
LOST_CHECK_EVERY = 30.0  # seconds between looks for detached trials that stopped heartbeating
STALL_SLACK = 0.25  # seconds of lateness of the liveness tick that count as a master stall


def _store_probe(conn: object) -> None:
    """A store call that does nothing: how long it waits is how long the store thread was
    busy."""


class Agents:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.db = dispatcher.db
        self.settings = dispatcher.settings
        self.clock = dispatcher.clock
        self.links = dispatcher.agents
        self.started = self.clock.monotonic()
        self._lost_checked = self.clock.monotonic()
        self.trial_usage = TrialUsage(self.clock.monotonic, self.clock.wall)

    def pool_of(self, agent_id: str) -> str | None:
        """The resource pool of a connected agent."""
        link = self.links.get(agent_id)
        return link.agent.pool if link is not None else None

    def connected(self) -> list[AgentLink]:
        return sorted(self.links, key=lambda link: link.agent.id)

    def pools(self) -> set[str]:
        """The resource pools of the connected agents (asked by every creation: no sort)."""
        return {link.agent.pool for link in self.links}

    async def register(
        self, agent_id: str, pool: str, slots: list[dict[str, Any]], hostname: str,
        addresses: list[str], running: list[str], no_gpu_reason: str | None = None,
        cred_id: int | None = None, sandbox: str = "",
    ) -> Agent:
        """An agent joins (or joins again); `cred_id` is the credential it registers with,
        bound to `agent_id` in the same transaction (None: a pool the master runs itself)."""
        if cred_id is not None and agent_id in self.master_ids():
            raise PermissionDenied(f"agent id {agent_id} belongs to the master's Slurm pool")
        agent = await self.dispatcher.run(agent_store.register, cred_id, agent_id, pool, slots,
                                          hostname, addresses)
        assert agent is not None
        link = AgentLink(agent, self.clock.monotonic(), no_gpu_reason=no_gpu_reason,
                         sandbox=sandbox[:200])
        self.links.put(link)
        await self._reconcile(link, set(running), registering=True)
        self.dispatcher.notify("agents")
        self.dispatcher.kick()
        return agent

    def master_ids(self) -> set[str]:
        """The agent ids of the pools the master runs itself (`SlurmProvider.agent_id`)."""
        return {f"slurm-{pool}" for pool in self.settings.slurm}

    async def heartbeat(
        self, agent_id: str, running: list[str], telemetry: dict[str, Any] | None,
        samples: list[Any] | None = None,
    ) -> None:
        """The agent is alive; keep its telemetry (`samples` since the last heartbeat, else
        the latest `telemetry`; malformed ones are dropped)."""
        link = self.links.require(agent_id)
        link.last_seen = self.clock.monotonic()
        taken = samples or ([telemetry] if telemetry else [])
        link.telemetry.record(taken)
        self.dispatcher.notify("agents")
        live = await self._reconcile(link, set(running), registering=False)
        self._trials_changed(self.trial_usage.record(
            agent_id, {a.id: a.trial_id for a in live.values()},
            [s for s in taken if isinstance(s, TelemetrySample)]))

    def _trials_changed(self, by_experiment: dict[int, set[int]]) -> None:
        """Trials whose resources changed: their experiments' stream topics re-read them."""
        for exp_id, trial_ids in by_experiment.items():
            self.dispatcher.notify(f"experiment:{exp_id}", ids=trial_ids)

    async def set_enabled(self, agent_id: str, enabled: bool, drain: bool = False) -> Agent:
        """Enable: the agent takes work again. Disable: no new work; as in Determined, its
        running trials are killed (and rescheduled) unless `drain` lets them finish."""
        link = self.links.require(agent_id)
        agent = await self.dispatcher.run(agent_store.set_enabled, agent_id, enabled, drain)
        assert agent is not None
        link.agent = agent
        return agent

    async def set_slot_enabled(self, agent_id: str, slot_id: int, enabled: bool) -> Agent:
        link = self.links.require(agent_id)
        agent = await self.dispatcher.run(agent_store.set_slot_enabled, agent_id, slot_id,
                                          enabled)
        assert agent is not None
        link.agent = agent
        return agent

    def drain(self, agent_id: str) -> None:
        self.links.require(agent_id).draining = True
        self.dispatcher.notify("agents")

    async def leave(self, agent_id: str) -> None:
        """An agent that stops says so: its slots leave the pool at once."""
        if self.links.drop(agent_id) is None:
            return
        self._trials_changed(self.trial_usage.forget_agent(agent_id))
        await self.dispatcher.run(exits.lose_agent, agent_id, f"agent {agent_id} left")
        self.dispatcher.notify("agents")
        self.dispatcher.kick()

    async def part_exit(self, agent_id: str, alloc_id: str, exit_code: int | None,
                        reason: str) -> None:
        """One agent's part of an allocation ended (`exits.part_exit`: a failure ends the
        parts on every other agent; the allocation ends when all parts have)."""
        await self.dispatcher.run(exits.part_exit, alloc_id, agent_id, exit_code, reason,
                                  self.links.ids())

    async def _reconcile(self, link: AgentLink, running: set[str],
                         registering: bool) -> dict[str, Allocation]:
        """Compare what the agent runs with what the store says it should run, and re-derive
        what a crash of the master (or a lost message) left undone: kills committed and not
        delivered are resent at registration, starts not acknowledged are resent, ASSIGNED
        allocations it runs become RUNNING, those it lost end, those the store does not know
        as live are killed. (The rest of recovery is `recovery.recover`'s.)"""
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
        now = self.clock.monotonic()
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
                await self.dispatcher.run(exits.lose, alloc.id, "agent restarted without it")
            elif now - link.sent_at.get(alloc.id, 0.0) > RESEND_AFTER:
                resend.append(alloc)
        if assigned:
            await self.dispatcher.run(trial_store.mark_running, *assigned)
        await self.dispatcher.resend_starts(resend, me)
        return live

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
        link = self.links.require(agent_id)
        link.last_seen = self.clock.monotonic()
        if not link.outbox:
            link.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.wake.wait(), timeout)
        if self.links.get(agent_id) is not link:
            return []
        work, link.outbox = link.outbox, []
        return work

    # --- liveness ----------------------------------------------------------------------

    async def liveness_loop(self) -> None:
        """Every `interval` of the clock, a `check`. How late the tick woke and how long the
        store thread kept it waiting are the master's own stall (`_forgive`)."""
        interval = min(1.0, self.settings.agent_timeout / 4)
        while True:
            late = await self.clock.sleep(interval)
            try:
                started = time.perf_counter()
                await self.db.run(_store_probe)  # waits behind whatever holds the store thread
                self._forgive(late + time.perf_counter() - started)
                await self.check()
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
        self.dispatcher.forgive(stalled)

    async def check(self) -> None:
        """One look at the clock: silent agents are lost, preemptions past their timeout are
        killed, detached trials that stopped heartbeating end, and allocations on agents that
        did not come back after a restart are lost."""
        now = self.clock.monotonic()
        timeout = self.settings.agent_timeout
        for link in self.links:
            if now - link.last_seen > timeout:
                log.warning("agent %s missed its heartbeats; its allocations are lost",
                            link.agent.id)
                self.links.drop(link.agent.id, lost=f"silent for more than {timeout:g} s")
                self._trials_changed(self.trial_usage.forget_agent(link.agent.id))
                self.dispatcher.notify("agents")
        for alloc_id, since in list(self.dispatcher.preempting.items()):
            if now - since <= self.settings.preemption_timeout:
                continue
            if self.dispatcher.preempting.pop(alloc_id, None) is None:
                continue  # another check took it meanwhile: one kill
            try:
                await self.dispatcher.run(trial_store.request_kill, alloc_id,
                                          "preemption timeout: it did not exit")
            except BaseException:
                self.dispatcher.preempting.setdefault(alloc_id, since)  # timed out still
                raise
        if now - self._lost_checked > LOST_CHECK_EVERY:
            self._lost_checked = now
            await self.dispatcher.run(unmanaged_store.mark_lost,
                                      self.clock.wall() - unmanaged_store.LOST_AFTER)
        if now - self.started < timeout:
            return  # agents of the master before a restart have this long to come back
        for alloc in await self.db.run(trial_store.live_allocations):
            gone = [a for a in alloc.agents if a not in self.links and a not in alloc.part_exits]
            if gone:
                await self.dispatcher.run(exits.lose, alloc.id, f"agent {gone[0]} is gone")
