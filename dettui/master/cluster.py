"""The master's live view of agents and allocations, and the loops that act on it.

A thin shell around the pure scheduler and lifecycle decisions: it reads the store, asks them
what to do, commits the result, and hands work to agents through their long-polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from dettui.errors import NotFound
from dettui.master import checkpoint_gc, lifecycle, scheduler
from dettui.master.events import Notifier
from dettui.master.launch_spec import build_start
from dettui.master.settings import MasterSettings
from dettui.master.store import Database, control, exits
from dettui.master.store import agents as agent_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import search as search_store
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from dettui.master.store.records import Agent, Allocation, Experiment
from dettui.master.telemetry import AgentTelemetry
from dettui.models import AllocationState, ExperimentState

log = logging.getLogger("dettui.master.cluster")
RESEND_AFTER = 10.0  # seconds an agent may sit on a start before it is sent again
LOST_CHECK_EVERY = 30.0  # seconds between looks for detached trials that stopped heartbeating
STALL_SLACK = 0.25  # seconds of lateness of the liveness tick that count as a master stall


@dataclass
class AgentLink:
    """A connected agent: its record, when we last heard of it, and its pending work."""

    agent: Agent
    last_seen: float
    outbox: list[dict[str, Any]] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: set[str] = field(default_factory=set)
    sent_at: dict[str, float] = field(default_factory=dict)
    telemetry: AgentTelemetry = field(default_factory=AgentTelemetry)
    no_gpu_reason: str | None = None  # the agent's note when NVML is unavailable
    draining: bool = False  # the agent is stopping: it takes no new work

    def send(self, message: dict[str, Any]) -> None:
        self.outbox.append(message)
        self.wake.set()


def _request(trial_id: int, exp: Experiment) -> scheduler.Request:
    return scheduler.Request(
        key=trial_id, job_id=exp.job_id, slots=exp.slots_per_trial, priority=exp.priority,
        queue_position=exp.queue_position, pool=exp.resource_pool, weight=exp.weight,
        max_slots=exp.max_slots)


def _nothing(conn: object) -> None:
    """A no-op store call: how long it waits is how long the store thread was busy."""


class Cluster:
    def __init__(
        self, db: Database, settings: MasterSettings, notifier: Notifier, cluster_id: str
    ) -> None:
        self.db = db
        self.settings = settings
        self.notifier = notifier
        self.cluster_id = cluster_id
        self.links: dict[str, AgentLink] = {}
        self.unschedulable: dict[int, str] = {}
        self.preempting: dict[str, float] = {}  # allocation id -> when it was told (monotonic)
        self.backfilled: set[str] = set()
        self._next_port = 30000 + (int(time.time()) % 5000)
        self.started = time.monotonic()
        self._lost_checked = time.monotonic()
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle of the cluster itself -------------------------------------------------

    async def start(self) -> None:
        await self._recover()
        self._tasks = [
            asyncio.create_task(self._schedule_loop(), name="dettui-scheduler"),
            asyncio.create_task(self._liveness_loop(), name="dettui-liveness"),
        ]
        self.kick()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for link in self.links.values():
            link.wake.set()

    def kick(self) -> None:
        """Ask for a scheduling pass soon."""
        self._kick.set()

    # --- agents ------------------------------------------------------------------------

    async def register(
        self, agent_id: str, pool: str, slots: list[dict[str, Any]], hostname: str,
        addresses: list[str], running: list[str], no_gpu_reason: str | None = None,
    ) -> Agent:
        agent = await self.db.run(agent_store.upsert, agent_id, pool, slots, hostname, addresses)
        old = self.links.get(agent_id)
        link = AgentLink(agent, time.monotonic(), no_gpu_reason=no_gpu_reason)
        if old is not None:
            old.wake.set()
            link.telemetry = old.telemetry  # the history survives a re-registration
        self.links[agent_id] = link
        await self._reconcile(link, set(running), registering=True)
        self.notifier.notify("agents")
        self.kick()
        return agent

    async def heartbeat(
        self, agent_id: str, running: list[str], telemetry: dict[str, Any] | None,
        samples: list[Any] | None = None,
    ) -> None:
        """The agent is alive; keep its telemetry (`samples` since the last heartbeat, else
        the latest `telemetry`; malformed ones are dropped)."""
        link = self._link(agent_id)
        link.last_seen = time.monotonic()
        link.telemetry.record(samples or ([telemetry] if telemetry else []))
        self.notifier.notify("agents")
        await self._reconcile(link, set(running), registering=False)

    async def set_enabled(self, agent_id: str, enabled: bool) -> Agent:
        """Disable: no new work goes to the agent (running trials finish). Enable: it's back."""
        link = self._link(agent_id)
        link.agent = await self.db.run(agent_store.set_enabled, agent_id, enabled)
        self.notifier.notify("agents")
        self.kick()
        return link.agent

    def drain(self, agent_id: str) -> None:
        self._link(agent_id).draining = True
        self.notifier.notify("agents")

    async def leave(self, agent_id: str) -> None:
        """An agent that stops says so: its slots leave the pool at once."""
        link = self.links.pop(agent_id, None)
        if link is None:
            return
        link.wake.set()
        for alloc in await self.db.run(trial_store.live_allocations):
            if agent_id in alloc.agents:
                await self.lose(alloc, f"agent {agent_id} left")
        self.notifier.notify("agents")
        self.kick()

    def _link(self, agent_id: str) -> AgentLink:
        link = self.links.get(agent_id)
        if link is None:
            raise NotFound(f"agent {agent_id} is not registered (register again)")
        return link

    async def _reconcile(self, link: AgentLink, running: set[str], registering: bool) -> None:
        """Compare what the agent runs with what the store says it should run."""
        me = link.agent.id
        live = {a.id: a for a in await self.db.run(trial_store.live_allocations)
                if me in a.agents and me not in a.part_exits}
        link.running = running
        for alloc_id in running - live.keys():
            link.send({"kind": "kill", "allocationId": alloc_id, "reason": "unknown allocation"})
        now = time.monotonic()
        for alloc in live.values():
            if alloc.id in running:
                if registering and (alloc.kill_requested or
                                    alloc.state is AllocationState.TERMINATING):
                    # the kill may have died with an earlier master
                    link.send({"kind": "kill", "allocationId": alloc.id, "reason": "killed"})
                    continue
                if alloc.state is AllocationState.ASSIGNED:
                    await self.db.run(trial_store.set_allocation, alloc.id,
                                      state=AllocationState.RUNNING)
                    self.notifier.notify(f"trial:{alloc.trial_id}")
                continue
            if registering and alloc.state is not AllocationState.ASSIGNED:
                await self.lose(alloc, "agent restarted without it")
            elif now - link.sent_at.get(alloc.id, 0.0) > RESEND_AFTER:
                await self._send_start(link, alloc)

    async def poll_work(self, agent_id: str, timeout: float) -> list[dict[str, Any]]:
        link = self._link(agent_id)
        link.last_seen = time.monotonic()
        if not link.outbox:
            link.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.wake.wait(), timeout)
        if self.links.get(agent_id) is not link:
            return []
        work, link.outbox = link.outbox, []
        return work

    async def _liveness_loop(self) -> None:
        interval = min(1.0, self.settings.agent_timeout / 4)
        while True:
            started = time.monotonic()
            await asyncio.sleep(interval)
            try:
                await self.db.run(_nothing)  # waits behind whatever holds the store thread
                self._forgive(time.monotonic() - started - interval)
                await self._check_liveness()
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
        for link in self.links.values():
            link.last_seen = min(now, link.last_seen + stalled)
        for alloc_id in self.preempting:
            self.preempting[alloc_id] += stalled

    async def _check_liveness(self) -> None:
        now = time.monotonic()
        for agent_id, link in list(self.links.items()):
            if now - link.last_seen > self.settings.agent_timeout:
                log.warning("agent %s missed its heartbeats; its allocations are lost", agent_id)
                del self.links[agent_id]
                link.wake.set()
                self.notifier.notify("agents")
        for alloc_id, since in list(self.preempting.items()):
            if now - since > self.settings.preemption_timeout:
                alloc = await self.db.run(trial_store.allocation, alloc_id)
                del self.preempting[alloc_id]
                if alloc.state is not AllocationState.EXITED:
                    await self.kill_allocation(alloc, "preemption timeout: it did not exit")
        if now - self._lost_checked > LOST_CHECK_EVERY:
            self._lost_checked = now
            await self.settle_unmanaged(await self.db.run(
                unmanaged_store.mark_lost, time.time() - unmanaged_store.LOST_AFTER))
        if now - self.started < self.settings.agent_timeout:
            return
        for alloc in await self.db.run(trial_store.live_allocations):
            gone = [a for a in alloc.agents if a not in self.links and a not in alloc.part_exits]
            if gone:
                await self.lose(alloc, f"agent {gone[0]} is gone")

    # --- scheduling ---------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            try:
                await self.schedule_once()
            except Exception:  # noqa: BLE001
                log.exception("scheduling pass failed")
            await asyncio.sleep(0.01)

    async def schedule_once(self) -> None:
        pending = await self.db.run(trial_store.pending)
        live = await self.db.run(trial_store.live_allocations)
        if not pending and not live:
            if self.unschedulable:
                self.notifier.notify("jobs")
            self.unschedulable = {}
            return
        exps = {e.id: e for e in await self.db.run(exp_store.live)}
        requests = [_request(t.id, exps[t.experiment_id]) for t in pending
                    if t.experiment_id in exps]
        running = await self._running(live, exps)
        decision = scheduler.schedule(requests, await self._agent_views(live), running,
                                      self.settings.policies)
        if dict(decision.unschedulable) != self.unschedulable:
            self.notifier.notify("jobs")  # the queue shows why jobs wait
        self.unschedulable = dict(decision.unschedulable)
        for alloc_id in decision.preempt:
            if alloc_id not in self.preempting:
                log.info("preempting allocation %s for a more urgent job", alloc_id)
                await self.preempt(alloc_id)
        for assignment in decision.start:
            await self._start(assignment)

    async def _running(self, live: list[Allocation],
                       exps: dict[int, Experiment]) -> list[scheduler.Running]:
        out = []
        for alloc in live:
            if alloc.kill_requested:
                continue
            trial = await self.db.run(trial_store.get, alloc.trial_id)
            exp = exps.get(trial.experiment_id)
            if exp is None or exp.state is not ExperimentState.ACTIVE:
                continue
            out.append(scheduler.Running(
                key=alloc.id, job_id=exp.job_id, slots=exp.slots_per_trial,
                priority=exp.priority, queue_position=exp.queue_position,
                pool=exp.resource_pool, started=alloc.start_time, weight=exp.weight,
                max_slots=exp.max_slots,
                placement=tuple((a, tuple(sl)) for a, sl in alloc.parts),
                preempting=alloc.id in self.preempting))
        return out

    async def _start(self, assignment: scheduler.Assignment) -> None:
        parts = [(a, list(sl)) for a, sl in assignment.parts] or None
        port = self._port() if parts else None
        alloc = await self.db.run(trial_store.allocate, assignment.key, assignment.agent_id,
                                  list(assignment.slots), parts, port)
        if assignment.backfilled:
            self.backfilled.add(alloc.id)
        trial = await self.db.run(trial_store.get, alloc.trial_id)
        self.notifier.notify(f"trial:{trial.id}", f"experiment:{trial.experiment_id}", "jobs")
        for agent_id in alloc.agents:
            link = self.links.get(agent_id)
            if link is not None:
                await self._send_start(link, alloc)

    def _port(self) -> int:
        """A rendezvous port for a trial spanning agents (torchrun's master port on the chief)."""
        self._next_port = 30000 + (self._next_port - 30000 + 1) % 5000
        return self._next_port

    async def _agent_views(self, live: list[Allocation]) -> list[scheduler.AgentView]:
        used: dict[str, set[int]] = {}
        for alloc in live:
            for agent_id, slots in alloc.parts:
                used.setdefault(agent_id, set()).update(slots)
        return [
            scheduler.AgentView(
                id=link.agent.id, pool=link.agent.pool,
                slot_ids=tuple(int(s["id"]) for s in link.agent.slots),
                used=frozenset(used.get(link.agent.id, ())),
                enabled=link.agent.enabled and not link.draining,
            )
            for link in self.links.values()
        ]

    async def _send_start(self, link: AgentLink, alloc: Allocation) -> None:
        peers = {a: self.links[a].agent for a in alloc.agents if a in self.links}
        message = await self.db.call(build_start, self.db.conn, alloc, link.agent, peers,
                                     self.cluster_id, self.settings)
        link.sent_at[alloc.id] = time.monotonic()
        link.send(message)

    # --- exits ----------------------------------------------------------------------------

    async def part_exit(self, agent_id: str, alloc_id: str, exit_code: int | None,
                        reason: str) -> None:
        """One agent's part of an allocation ended. A failure ends the parts on every other
        agent at once (torchrun alone would leave them hanging); the allocation ends when all
        parts have, with the first failure's code (`exits.part_exit`, one commit)."""
        done = await self.db.run(exits.part_exit, alloc_id, agent_id, exit_code, reason,
                                 frozenset(self.links))
        if done.end_parts:
            log.info("allocation %s: node %s failed (%s); ending it on %s", alloc_id, agent_id,
                     exit_code, ", ".join(done.end_parts))
        for other in done.end_parts:
            link = self.links.get(other)
            if link is not None:
                link.send({"kind": "kill", "allocationId": alloc_id,
                           "reason": f"node {agent_id} failed"})
        await self._after_exit(done)

    async def finish(self, alloc_id: str, exit_code: int | None, reason: str,
                     message: str = "") -> None:
        """End the whole allocation now (lost, or killed with no agent left). Idempotent."""
        await self._after_exit(await self.db.run(exits.end, alloc_id, exit_code, reason),
                               message)

    async def _after_exit(self, done: exits.Exit, message: str = "") -> None:
        """What follows an allocation's end, once committed: followers told, long-polls of
        trials the searcher stopped woken, checkpoints of an ended experiment collected."""
        if done.trial is None:
            return
        alloc, trial = done.alloc, done.trial
        self.preempting.pop(alloc.id, None)
        self.backfilled.discard(alloc.id)
        log.info("allocation %s exited (code %s %s) -> trial %s %s", alloc.id, alloc.exit_code,
                 alloc.exit_reason or message, trial.id, trial.state.short)
        self.notifier.notify(f"trial:{trial.id}", f"allocation:{alloc.id}",
                             f"experiment:{trial.experiment_id}", "jobs")
        self._searcher_effects(trial.experiment_id, done.searcher)
        await self._ended(done.ended)
        self.kick()

    # --- searchers ------------------------------------------------------------------------

    async def validation_reported(self, trial_id: int, steps: int,
                                  metrics: dict[str, Any]) -> str | None:
        """Feed a validation to the searcher; the searcher's complaint, if any."""
        outcome, ended = await self.db.run(exits.validation, trial_id, steps, metrics)
        trial = await self.db.run(trial_store.get, trial_id)
        self._searcher_effects(trial.experiment_id, outcome)
        await self._ended(ended)
        return outcome.error

    def _searcher_effects(self, exp_id: int, outcome: search_store.Outcome) -> None:
        """After the commit of a searcher event: wake the preemption long-polls of the trials it
        stopped, tell followers, and schedule the trials it created."""
        if not outcome.created and not outcome.stopped:
            return
        for alloc_id in outcome.preempt:
            log.info("searcher of experiment %d stops allocation %s", exp_id, alloc_id)
            self._preempting(alloc_id)
        for trial_id in outcome.stopped:
            self.notifier.notify(f"trial:{trial_id}")
        if outcome.created:
            log.info("searcher of experiment %d created %d trial(s)", exp_id,
                     len(outcome.created))
        self.notifier.notify(f"experiment:{exp_id}", "jobs", "experiments")
        self.kick()

    async def _ended(self, exp: Experiment | None) -> None:
        """An experiment ended (committed, with `gc_pending`): tell followers, collect."""
        if exp is None:
            return
        self.notifier.notify(f"experiment:{exp.id}", "jobs", "experiments")
        await self._collect(exp.id)

    async def _collect(self, exp_id: int) -> None:
        try:
            await checkpoint_gc.collect(self.db, exp_id)
            await self.db.run(exits.gc_done, exp_id)
        except Exception:  # noqa: BLE001 - GC failing must not undo the ending
            log.exception("checkpoint GC of experiment %d failed", exp_id)

    async def settle_unmanaged(self, changes: list[tuple[int, ExperimentState]]) -> None:
        """Detached experiments whose state changed: tell followers; GC the ones that ended."""
        for exp_id, state in changes:
            self.notifier.notify(f"experiment:{exp_id}", "experiments")
            if state.is_terminal():
                await self._collect(exp_id)

    # --- control: kill, cancel, pause, activate, preemption -----------------------------

    async def stop_experiment(self, exp_id: int, how: ExperimentState) -> None:
        """Kill (STOPPING_KILLED) ends processes now; cancel and pause ask trials to checkpoint."""
        stopped = await self.db.run(control.stop, exp_id, how)
        for alloc in stopped.kill:
            await self._deliver_kill(alloc, "experiment killed")
        for alloc_id in stopped.preempt:
            self._preempting(alloc_id)
        self.notifier.notify(f"experiment:{exp_id}", "jobs", "experiments")
        await self._ended(stopped.ended)
        self.kick()

    async def activate(self, exp_id: int) -> None:
        if await self.db.run(control.activate, exp_id):
            self.notifier.notify(f"experiment:{exp_id}", "jobs", "experiments")
            self.kick()

    async def kill_allocation(self, alloc: Allocation, why: str) -> None:
        alloc = await self.db.run(trial_store.set_allocation, alloc.id, kill_requested=1,
                                  state=AllocationState.TERMINATING)
        await self._deliver_kill(alloc, why)

    async def _deliver_kill(self, alloc: Allocation, why: str) -> None:
        """Tell every agent still running a part of `alloc` to end it; with none left to tell,
        the allocation has ended."""
        reached = False
        for agent_id in alloc.agents:
            link = self.links.get(agent_id)
            if link is not None and agent_id not in alloc.part_exits:
                link.send({"kind": "kill", "allocationId": alloc.id, "reason": why})
                reached = True
        if not reached:
            await self.finish(alloc.id, None, lifecycle.KILLED, "agent gone")

    async def lose(self, alloc: Allocation, why: str) -> None:
        """A part of the allocation is gone with its agent: end the rest, requeue the trial."""
        for agent_id in alloc.agents:
            link = self.links.get(agent_id)
            if link is not None and agent_id not in alloc.part_exits:
                link.send({"kind": "kill", "allocationId": alloc.id, "reason": why})
        await self.finish(alloc.id, None, lifecycle.LOST, why)

    async def _recover(self) -> None:
        """After a restart, re-derive from the committed state what a crash may have lost.
        Kills are resent when agents register (`_reconcile`), preemption long-polls answer from
        the store; here: preemptions asked before the crash keep their timeout; trials a
        searcher stopped get their preemption; allocations whose every part had exited end
        (older versions committed the two apart); searcher events an older version lost are
        replayed and experiments whose last trial ended are settled; experiments that ended
        with their checkpoint GC pending are collected."""
        for alloc_id in await self.db.run(exits.flag_stopped):
            log.info("allocation %s: its trial was stopped by the searcher; preempting it",
                     alloc_id)
        for alloc in await self.db.run(trial_store.live_allocations):
            if alloc.preempt_requested:
                self.preempting.setdefault(alloc.id, time.monotonic())
            if alloc.agents and all(a in alloc.part_exits for a in alloc.agents):
                log.info("allocation %s: every part had exited; ending it", alloc.id)
                await self.finish(alloc.id, *exits.first_failure(alloc))
        for exp in await self.db.run(exp_store.live):
            outcome, ended = await self.db.run(exits.catch_up, exp.id)
            self._searcher_effects(exp.id, outcome)
            await self._ended(ended)
        for exp_id in await self.db.run(exits.gc_pending):
            await self._collect(exp_id)

    async def preempt(self, alloc_id: str) -> None:
        await self.db.run(trial_store.set_allocation, alloc_id, preempt_requested=1)
        self._preempting(alloc_id)

    def _preempting(self, alloc_id: str) -> None:
        """After `preempt_requested` is committed: time the preemption, wake the long-poll."""
        self.preempting.setdefault(alloc_id, time.monotonic())
        self.notifier.notify(f"preempt:{alloc_id}")

    async def wait_preemption(self, alloc_id: str, timeout: float) -> bool:
        """Determined's preemption long-poll: True at once if preempted, else wait."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            alloc = await self.db.run(trial_store.allocation, alloc_id)
            if alloc.preempt_requested:
                return True
            if alloc.state is AllocationState.EXITED:
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self.notifier.wait(f"preempt:{alloc_id}", remaining)

    async def ack_preemption(self, alloc_id: str) -> None:
        await self.db.run(trial_store.set_allocation, alloc_id, preempt_acked=1)
