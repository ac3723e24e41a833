"""The scheduling loop: on every kick, one pass of the pure scheduler over the queue and the
agents, then the allocations it starts (one commit each, start messages after, by the
dispatcher) and the preemptions it asks for.

The queue as the scheduler sees it is kept between passes (`KeptQueue`): the live jobs and, for
each active one, its first queued trials as requests. A pass reads again only the experiments
the store marked as changed since the last pass (store/queue_reads.py), so its cost follows what
changed, not the size of the queue; a whole read happens at the first pass, after a failed one,
when many changed at once, and every RESYNC seconds all the same. It is touched by one pass at
a time (on the CPU pool's thread), never concurrently."""

from __future__ import annotations

import asyncio
import logging
import operator
import secrets
import time
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from dettui.master import offload, scheduler
from dettui.master.cluster.dispatcher import AgentLink, Dispatcher, agent_views
from dettui.master.store import queue_reads
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation, Job
from dettui.models import ExperimentState

log = logging.getLogger("dettui.master.cluster")

PORTS_PER_ALLOCATION = 4
# A pass that took this long (seconds) and was kicked again meanwhile is followed by a gap
# as long as itself, so passes over a big queue use at most half the time; shorter passes
# run again at once (a trial's exit starts the next one without waiting on a timer).
PACE_AFTER = 0.05
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


# How `_running` weighed each live allocation at the last pass, with what it was made from.
Weighed = dict[str, tuple[Allocation, Job, bool, scheduler.Running]]


def _running(live: list[Allocation], experiment_of: dict[int, int], jobs: dict[int, Job],
             preempting: set[str], made: Weighed | None = None) -> list[scheduler.Running]:
    """The live allocations of active jobs, as the scheduler weighs them. With `made` (kept
    from the last pass, brought up to date here), an allocation whose record, job and
    preemption are the very ones of the last pass (both records are immutable and replaced
    when they change) gives the same `Running` again: 800 of them were built afresh every
    pass, 8 % of the master's GIL time while experiments were created at lab scale."""
    out = []
    kept: Weighed = {}
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
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.db = dispatcher.db
        self.clock = dispatcher.clock
        self._next_port = first_port()
        self.waiting = KeptQueue()
        self.made: Weighed = {}  # the running allocations as the last pass weighed them
        self.watch: queue_reads.Watch | None = None  # set up by the first pass
        self.watching = False
        self.passing = asyncio.Lock()  # held by a pass (a test holds it to see the kept queue)
        self.unschedulable: dict[int, str] = {}  # trial -> why it waits (the last pass's)
        # Why the other jobs wait, as the last pass found: experiment -> the wait of its first
        # request the pass looked at, and per pool why those it stopped before wait.
        self.waits: dict[int, scheduler.Wait] = {}
        self.tails: dict[str, scheduler.Tail] = {}
        # Where else trials wait, and why (the Slurm pools' pending jobs): trial -> reason.
        self.holds: list[Callable[[], Mapping[int, str]]] = []
        self.stopped = False  # the master is stopping: no allocation starts any more

    async def loop(self) -> None:
        """A pass on every kick, at once: an exit's commit kicks, and the pass that starts the
        next trial runs without waiting on a timer. Only a long pass (PACE_AFTER) kicked again
        while it ran is followed by a gap, paced on the process's own stopwatch, not the clock:
        it shares out real CPU time, whatever time a test makes the clock show."""
        kicked = self.dispatcher.kicked
        while True:
            await kicked.wait()
            kicked.clear()
            started = time.perf_counter()
            try:
                async with self.passing:
                    await self.run_pass()
            except Exception:  # noqa: BLE001
                log.exception("scheduling pass failed")
            # A pass plans over the whole queue (it reads only what changed, but the plan sees
            # every request): kicks that come faster than long passes take (a burst of
            # creations at 10,000 queued) share one, so passes use at most half the time.
            took = time.perf_counter() - started
            if took >= PACE_AFTER and kicked.is_set():
                await asyncio.sleep(took)

    async def run_pass(self) -> None:
        """One scheduling pass: read what changed, plan, start and preempt."""
        if self.stopped:
            return
        if not self.watching:
            self.watch = await self.db.run(queue_reads.watch)
            self.watching = True
        now = self.clock.monotonic()
        links = list(self.dispatcher.agents)
        try:
            live, experiment_of, agents, per_job, read = await self.db.run(
                self._survey, self.watch, links, now)
            # Applying a read and planning are CPU work that grows with what changed and with
            # the requests (10,000 jobs: 0.4 s): on the CPU pool, so the loop keeps answering
            # requests and heartbeats meanwhile.
            planned = await offload.cpu(self._plan, read, now, per_job, live, experiment_of,
                                        agents, set(self.dispatcher.preempting))
        except BaseException:
            self.waiting.reset()  # the changes it took are not in the queue it keeps
            raise
        if planned is None:
            if self.unschedulable or self.waits or self.tails:
                self.dispatcher.notify("jobs")
            self.unschedulable, self.waits, self.tails = {}, {}, {}
            return
        decision, more, waits = planned
        if more:
            self.dispatcher.kick()  # trials not read this pass (zero-slot ones) may start next
        if dict(decision.unschedulable) != self.unschedulable or waits != self.waits or \
                decision.tails != self.tails:
            self.dispatcher.notify("jobs")  # the queue shows why jobs wait
        self.unschedulable = dict(decision.unschedulable)
        self.waits, self.tails = waits, decision.tails
        for alloc_id in decision.preempt:
            if alloc_id not in self.dispatcher.preempting:
                log.info("preempting allocation %s for a more urgent job", alloc_id)
                await self.dispatcher.run(trial_store.request_preempt, alloc_id)
        if decision.start:
            await self._start(list(decision.start),
                              {a.key: self.waiting.experiment_of[a.key] for a in decision.start})

    def _survey(self, conn: Any, watch: queue_reads.Watch | None, links: list[AgentLink],
                now: float) -> tuple[list[Allocation], dict[int, int],
                                     list[scheduler.AgentView], int, queue_reads.Read]:
        """On the store thread, in one call (a trial's exit waits on each hop of its pass):
        the live allocations and their experiments, the agents as the scheduler sees them,
        how many trials of a job the pass may start, and the queue's changes (`read`)."""
        live, experiment_of = queue_reads.running(conn, watch)
        agents = agent_views(links, live)
        # No pass starts more trials of a job than there are free slots (plus one, to learn
        # whether the rest fit): the others are counted, not read.
        per_job = sum(len(a.free) for a in agents if a.enabled) + 1
        also, limit, whole = self.waiting.wants(per_job, now)
        if watch is None:  # nothing marks changes (PostgreSQL): read it all, no more
            limit = per_job
        return live, experiment_of, agents, per_job, queue_reads.read(conn, watch, also, limit,
                                                                      whole)

    def _plan(self, read: queue_reads.Read, now: float, per_job: int, live: list[Allocation],
              experiment_of: dict[int, int], agents: list[scheduler.AgentView],
              preempting: set[str],
              ) -> tuple[scheduler.Decision, bool, dict[int, scheduler.Wait]] | None:
        """The queue kept brought up to date with `read`, then the pass's decision over it,
        whether trials it did not read may start at once, and why jobs wait, by experiment
        (None: nothing waits and nothing runs). The pass takes the requests one by one and
        only as many as it can use."""
        self.waiting.apply(read, now)
        if not self.waiting.heads and not live:
            return None
        running = _running(live, experiment_of, self.waiting.jobs, preempting, self.made)
        policies = self.dispatcher.settings.policies
        fair = any(p.scheduler == scheduler.FAIR_SHARE for p in policies.values())
        unread = self.waiting.unread(per_job) if fair else {}
        decision = scheduler.schedule(self.waiting.queue(per_job), agents, running, policies,
                                      unread=unread)
        owner = self.waiting.experiment_of
        waits = {owner[t]: w for t, w in decision.waits.items() if t in owner}
        return decision, bool(decision.start) and self.waiting.any_unread(per_job), waits

    async def _start(self, assignments: list[scheduler.Assignment],
                     experiment_of: dict[int, int]) -> int:
        """Allocate the pass's trials (a commit each, in one store call); the dispatcher sends
        the start messages. How many started. A trial that stopped waiting since this pass
        read the queue (paused, canceled, killed) is skipped, with nothing sent, and the queue
        planned again."""
        placements = []
        for a in assignments:
            parts = [(agent, list(sl)) for agent, sl in a.parts] or None
            placements.append(trial_store.Placement(
                a.key, a.agent_id, list(a.slots), parts, self._port() if parts else None,
                experiment_of[a.key]))
        allocs = await self.dispatcher.run(trial_store.allocate_many, placements,
                                           mint=self.dispatcher.mint)
        assert allocs is not None
        for assignment, alloc in zip(assignments, allocs, strict=True):
            if alloc is not None and assignment.backfilled:
                self.dispatcher.backfilled[alloc.id] = alloc.trial_id
        return sum(a is not None for a in allocs)

    def waiting_reasons(self) -> dict[int, str]:
        """Why each waiting trial could not start at the last pass, or why the Slurm job of
        its allocation is pending (trial id -> reason)."""
        out = dict(self.unschedulable)
        for held in self.holds:
            out.update(held())
        return out

    def job_waits(self) -> tuple[dict[int, scheduler.Wait], dict[str, scheduler.Tail]]:
        """Why jobs wait, as the last pass found (`scheduler.Waiting`): by experiment, and per
        pool for the jobs the pass stopped before (each pass replaces both, never changes
        them: safe to read from another thread)."""
        return self.waits, self.tails

    def trial_experiments(self) -> Mapping[int, int]:
        """Each queued trial the scheduler has read -> its experiment (for reads only: a
        trial's experiment never changes, so what it finds is right as the queue moves on)."""
        return self.waiting.experiment_of

    def backfilled_trials(self) -> set[int]:
        """Trials running in allocations the scheduler started by backfilling: around a job
        ahead of them in the queue that could not start (Determined's SCHEDULED_BACKFILLED)."""
        return set(self.dispatcher.backfilled.values())

    def _port(self) -> int:
        """A rendezvous port for a trial spanning agents (torchrun's master port on the chief);
        the three after it are the allocation's too (Determined's ZMQ and SSH ports)."""
        self._next_port = next_port(self._next_port)
        return self._next_port


# --- the queue kept between passes ----------------------------------------------------

HEADS = 64  # queued trials read of a job at least, so that free slots come and go unread
RESYNC = 300.0  # seconds between whole reads (a safety net: the store marks every change)


_KEY = operator.attrgetter("key")


def request(trial_id: int, job: Job) -> scheduler.Request:
    return scheduler.Request(
        key=trial_id, job_id=job.job_id, slots=job.slots_per_trial, priority=job.priority,
        queue_position=job.queue_position, pool=job.resource_pool, weight=job.weight,
        max_slots=job.max_slots)


class KeptQueue:
    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}  # live experiments (active, paused, stopping) by id
        self.heads: dict[int, tuple[scheduler.Request, ...]] = {}  # active, with queued trials
        self.counts: dict[int, int] = {}  # how many each of those has queued in all
        self.short: dict[int, int] = {}  # jobs with more queued than read -> how many read
        self.experiment_of: dict[int, int] = {}  # queued trial read -> its experiment
        self.whole_at: float | None = None  # when the last whole read was (monotonic)
        # The jobs of `heads` in the scheduler's order, (priority, queue position, id), sorted:
        # kept as jobs change, so a pass hands its requests over in order, unsorted.
        self.order: list[tuple[int, float, int]] = []
        self.place: dict[int, tuple[int, float, int]] = {}  # job -> its entry in `order`
        # How many jobs of `heads` ask for each (pool, slots per trial): a pass learns the
        # pools and whether any request could never fit without going through the requests.
        self.shapes: Counter[tuple[str, int]] = Counter()

    def reset(self) -> None:
        """Read the whole queue at the next pass (a pass failed after taking the changes)."""
        self.whole_at = None

    def wants(self, per_job: int, now: float) -> tuple[list[int], int, bool]:
        """What the next read must cover for a pass that may start `per_job` trials of a job:
        the jobs read short of that, how many trials to read of each, whether to read all."""
        also = [e for e, n in self.short.items() if n < per_job]
        whole = self.whole_at is None or now - self.whole_at >= RESYNC
        return also, max(per_job, HEADS), whole

    def apply(self, read: queue_reads.Read, now: float) -> None:
        if read.whole:
            self.jobs, self.heads, self.counts, self.short = {}, {}, {}, {}
            self.experiment_of, self.order, self.place = {}, [], {}
            self.shapes = Counter()
            self.whole_at = now
        else:
            for exp_id in read.ids:
                old = self.jobs.pop(exp_id, None)
                self.counts.pop(exp_id, None)
                self.short.pop(exp_id, None)
                reqs = self.heads.pop(exp_id, ())
                for req in reqs:
                    self.experiment_of.pop(req.key, None)
                if reqs and old is not None:
                    self._count(old, -1)
                if (place := self.place.pop(exp_id, None)) is not None:
                    del self.order[bisect_left(self.order, place)]
        self.jobs.update(read.jobs)
        for exp_id, first in read.heads.items():
            job = read.jobs[exp_id]
            self.heads[exp_id] = tuple(request(t, job) for t in first)
            self._count(job, 1)
            self.counts[exp_id] = n = read.counts[exp_id]
            if n > len(first):
                self.short[exp_id] = len(first)
            for t in first:
                self.experiment_of[t] = exp_id
            self.place[exp_id] = place = (job.priority, job.queue_position, exp_id)
            if not read.whole:
                insort(self.order, place)
        if read.whole:
            self.order = sorted(self.place.values())

    def _count(self, job: Job, n: int) -> None:
        key = (job.resource_pool, job.slots_per_trial)
        self.shapes[key] += n
        if not self.shapes[key]:
            del self.shapes[key]

    def queue(self, per_job: int) -> Kept:
        """The first `per_job` queued trials of each active job, as a pass takes them
        (`scheduler.Queue`): one at a time, in the scheduler's order."""
        return Kept(self, per_job)

    def requests(self, per_job: int) -> list[scheduler.Request]:
        """All of `queue`'s requests, in order (every pool's)."""
        kept = self.queue(per_job)
        return scheduler.order(r for pool in kept.pools() for r in kept.in_order(pool))

    def unread(self, per_job: int) -> dict[str, int]:
        """The slots of each job's queued trials left out of `queue` (fair share counts them
        as demand)."""
        jobs = self.jobs
        return {jobs[e].job_id: jobs[e].slots_per_trial * (n - per_job)
                for e, n in self.counts.items() if n > per_job}

    def any_unread(self, per_job: int) -> bool:
        """Whether some job has more queued trials than `queue` hands over."""
        return any(n > per_job for n in self.counts.values())


class Kept:
    """A pass's view of the kept queue (`scheduler.Queue`)."""

    def __init__(self, waiting: KeptQueue, per_job: int) -> None:
        self.waiting = waiting
        self.per_job = per_job
        self._pools = {pool for pool, _ in waiting.shapes}

    def pools(self) -> Collection[str]:
        return self._pools

    def sizes(self, pool: str) -> Collection[int]:
        return {slots for p, slots in self.waiting.shapes if p == pool}

    def in_order(self, pool: str) -> Iterator[scheduler.Request]:
        w, per_job = self.waiting, self.per_job
        order, heads, jobs = w.order, w.heads, w.jobs
        mixed = len(self._pools) > 1
        i, end = 0, len(order)
        while i < end:
            priority, position, exp_id = order[i]
            j = i + 1
            while j < end and order[j][1] == position and order[j][0] == priority:
                j += 1
            if j == i + 1:  # a job's requests are in trial id order already
                if not mixed or jobs[exp_id].resource_pool == pool:
                    yield from heads[exp_id][:per_job]
            else:  # jobs queued at the same place: their trials by id, as `order` sorts them
                yield from sorted((r for _, _, e in order[i:j]
                                   if not mixed or jobs[e].resource_pool == pool
                                   for r in heads[e][:per_job]), key=_KEY)
            i = j
