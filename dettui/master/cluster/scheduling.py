"""The scheduling loop: on every kick, one pass of the pure scheduler over the queue and the
agents, then the allocations it starts (one commit each, start messages after) and the
preemptions it asks for."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Mapping

from dettui.master import offload, scheduler
from dettui.master.cluster.allocations import Allocations
from dettui.master.cluster.hub import Hub
from dettui.master.cluster.waiting import Waiting
from dettui.master.store import trials as trial_store
from dettui.master.store import waiting as waiting_store
from dettui.master.store.records import Allocation, Job
from dettui.models import ExperimentState

log = logging.getLogger("dettui.master.cluster")

PORTS_PER_ALLOCATION = 4
MIN_GAP = 0.01  # seconds between two scheduling passes, at least
# Rendezvous ports of trials that span agents (torchrun's master port on the chief's host).
# Below Linux's ephemeral range (32768-60999): a port in it may be held by any process's
# client socket on that host (30000-34999 overlapped it, and a DDP trial failed with
# EADDRINUSE on 33988 while another suite's clients ran). Where a master starts in the range is
# random, so two masters on one host (or one restarted) do not walk the same ports in step.
PORTS = range(20000, 30000)


def first_port() -> int:
    """Where a master's walk of PORTS starts: at random, on an allocation's boundary."""
    return PORTS.start + secrets.randbelow(len(PORTS) // PORTS_PER_ALLOCATION) * \
        PORTS_PER_ALLOCATION


def next_port(last: int) -> int:
    """The rendezvous port after `last`, within PORTS (it wraps)."""
    return PORTS.start + (last - PORTS.start + PORTS_PER_ALLOCATION) % len(PORTS)


# What `_running` made of each live allocation at the last pass, with what it was made from.
Made = dict[str, tuple[Allocation, Job, bool, scheduler.Running]]


def _running(live: list[Allocation], experiment_of: dict[int, int], jobs: dict[int, Job],
             preempting: set[str], made: Made | None = None) -> list[scheduler.Running]:
    """The live allocations of active jobs, as the scheduler weighs them. With `made` (kept
    from the last pass, brought up to date here), an allocation whose record, job and
    preemption are the very ones of the last pass (both records are immutable and replaced
    when they change) gives the same `Running` again: 800 of them were built afresh every
    pass, 8 % of the master's GIL time while experiments were created at lab scale."""
    out = []
    kept: Made = {}
    for alloc in live:
        if alloc.kill_requested:
            continue
        exp = jobs.get(experiment_of.get(alloc.trial_id, -1))
        if exp is None or exp.state is not ExperimentState.ACTIVE:
            continue
        stopping = alloc.id in preempting
        last = made.get(alloc.id) if made is not None else None
        if last is not None and last[0] is alloc and last[1] is exp and last[2] == stopping:
            run = last[3]
        else:
            run = scheduler.Running(
                key=alloc.id, job_id=exp.job_id, slots=exp.slots_per_trial,
                priority=exp.priority, queue_position=exp.queue_position,
                pool=exp.resource_pool, started=alloc.start_time, weight=exp.weight,
                max_slots=exp.max_slots,
                placement=tuple((a, tuple(sl)) for a, sl in alloc.parts),
                preempting=stopping)
        kept[alloc.id] = (alloc, exp, stopping, run)
        out.append(run)
    if made is not None:
        made.clear()
        made.update(kept)
    return out


class Scheduling:
    def __init__(self, hub: Hub, allocations: Allocations) -> None:
        self.hub = hub
        self.db = hub.db
        self.allocations = allocations
        self._next_port = first_port()
        self.waiting = Waiting()
        self.made: Made = {}  # the running allocations as the last pass weighed them
        self.watch: waiting_store.Watch | None = None  # set up by the first pass
        self.watching = False
        self.passing = asyncio.Lock()  # held by a pass (a test holds it to see the kept queue)

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.hub.kicked.wait()
            self.hub.kicked.clear()
            started = loop.time()
            try:
                async with self.passing:
                    await self.once()
            except Exception:  # noqa: BLE001
                log.exception("scheduling pass failed")
            # A pass plans over the whole queue (it reads only what changed, but the plan sees
            # every request): kicks that come faster than passes take (a burst of creations at
            # 10,000 queued) share one, so passes use at most half the time.
            await asyncio.sleep(max(MIN_GAP, loop.time() - started))

    async def once(self) -> None:
        if self.hub.draining:
            return
        if not self.watching:
            self.watch = await self.db.run(waiting_store.watch)
            self.watching = True
        live, experiment_of = await self.db.run(waiting_store.running, self.watch)
        agents = self.hub.links.views(live)
        # No pass starts more trials of a job than there are free slots (plus one, to learn
        # whether the rest fit): the others are counted, not read.
        per_job = sum(len(a.free) for a in agents if a.enabled) + 1
        now = time.monotonic()
        also, limit, whole = self.waiting.wants(per_job, now)
        if self.watch is None:  # nothing marks changes (PostgreSQL): read it all, no more
            limit = per_job
        try:
            read = await self.db.run(waiting_store.read, self.watch, also, limit, whole)
            # Applying a read and planning are CPU work that grows with what changed and with
            # the requests (10,000 jobs: 0.4 s): on the CPU pool, so the loop keeps answering
            # requests and heartbeats meanwhile.
            planned = await offload.cpu(self._plan, read, now, per_job, live, experiment_of,
                                        agents, set(self.hub.preempting))
        except BaseException:
            self.waiting.reset()  # the changes it took are not in the queue it keeps
            raise
        if planned is None:
            if self.hub.unschedulable:
                self.hub.notify("jobs")
            self.hub.unschedulable = {}
            return
        decision, more = planned
        if more:
            self.hub.kick()  # trials not read this pass (zero-slot ones) may start next
        if dict(decision.unschedulable) != self.hub.unschedulable:
            self.hub.notify("jobs")  # the queue shows why jobs wait
        self.hub.unschedulable = dict(decision.unschedulable)
        for alloc_id in decision.preempt:
            if alloc_id not in self.hub.preempting:
                log.info("preempting allocation %s for a more urgent job", alloc_id)
                await self.allocations.preempt(alloc_id)
        if decision.start:
            await self._start(list(decision.start),
                              {a.key: self.waiting.experiment_of[a.key] for a in decision.start})

    def _plan(self, read: waiting_store.Read, now: float, per_job: int, live: list[Allocation],
              experiment_of: dict[int, int], agents: list[scheduler.AgentView],
              preempting: set[str]) -> tuple[scheduler.Decision, bool] | None:
        """The queue kept brought up to date with `read`, then the pass's decision over it,
        and whether trials it did not read may start at once (None: nothing waits and nothing
        runs). The pass takes the requests one by one and only as many as it can use."""
        self.waiting.apply(read, now)
        if not self.waiting.heads and not live:
            return None
        running = _running(live, experiment_of, self.waiting.jobs, preempting, self.made)
        policies = self.hub.settings.policies
        fair = any(p.scheduler == scheduler.FAIR_SHARE for p in policies.values())
        unread = self.waiting.unread(per_job) if fair else {}
        decision = scheduler.schedule(self.waiting.queue(per_job), agents, running, policies,
                                      unread=unread)
        return decision, bool(decision.start) and self.waiting.any_unread(per_job)

    async def _start(self, assignments: list[scheduler.Assignment],
                     experiment_of: dict[int, int]) -> int:
        """Allocate the pass's trials (one commit), then send the start messages; how many
        started. A trial that stopped waiting since this pass read the queue (paused,
        canceled, killed) is skipped, with nothing sent, and the queue planned again."""
        placements = []
        for a in assignments:
            parts = [(agent, list(sl)) for agent, sl in a.parts] or None
            placements.append(trial_store.Placement(
                a.key, a.agent_id, list(a.slots), parts, self._port() if parts else None))
        allocs = await self.db.run(trial_store.allocate_many, placements, mint=self.hub.mint)
        starts = []
        for assignment, alloc in zip(assignments, allocs, strict=True):
            if alloc is None:
                log.info("trial %s stopped waiting before it could start", assignment.key)
                self.hub.kick()  # the queue changed under this pass: plan again
                continue
            if assignment.backfilled:
                self.hub.backfilled[alloc.id] = alloc.trial_id
            self.hub.experiment_changed(experiment_of[alloc.trial_id], alloc.trial_id,
                                        jobs=True)
            starts += [(link, alloc) for agent_id in alloc.agents
                       if (link := self.hub.links.get(agent_id)) is not None]
        await self.hub.send_starts(starts)
        return sum(a is not None for a in allocs)

    def waiting_reasons(self) -> dict[int, str]:
        """Why each waiting trial could not start at the last pass, or why the Slurm job of
        its allocation is pending (trial id -> reason)."""
        return {**self.hub.unschedulable, **self.hub.held}

    def trial_experiments(self) -> Mapping[int, int]:
        """Each queued trial the scheduler has read -> its experiment (for reads only: a
        trial's experiment never changes, so what it finds is right as the queue moves on)."""
        return self.waiting.experiment_of

    def backfilled_trials(self) -> set[int]:
        """Trials running in allocations the scheduler started by backfilling: around a job
        ahead of them in the queue that could not start (Determined's SCHEDULED_BACKFILLED)."""
        return set(self.hub.backfilled.values())

    def _port(self) -> int:
        """A rendezvous port for a trial spanning agents (torchrun's master port on the chief);
        the three after it are the allocation's too (Determined's ZMQ and SSH ports)."""
        self._next_port = next_port(self._next_port)
        return self._next_port
