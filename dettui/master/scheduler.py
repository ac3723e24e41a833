"""The scheduling pass: a pure function of the queue, the running allocations and the agents.

No I/O and no clocks: inputs in, decisions out (which trials start where, which running
allocations must be preempted, which requests can never fit). Two schedulers, per pool:

- priority (Determined's, SEMANTICS §5.1): lower number first, then queue position. Gang
  allocation: all slots of a trial or none. With preemption off nothing below the first blocked
  priority starts; with it on, smaller lower-priority jobs backfill, and a blocked job preempts
  running lower-priority trials (newest first) until it fits.
- fair_share (§5.2): slots shared by weight with max-min progressive filling, capped by
  max_slots; always preemptive.

A trial that needs more slots than the largest agent spans whole agents: its slot count must be
a multiple of the agents' slot count (seed 002).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

PRIORITY = "priority"
FAIR_SHARE = "fair_share"


@dataclass(frozen=True)
class PoolPolicy:
    scheduler: str = PRIORITY
    preemption: bool = False


class Request(NamedTuple):  # a tuple: a pass builds one per waiting trial (100,000 at scale)
    key: int  # trial id
    job_id: str
    slots: int
    priority: int
    queue_position: float
    pool: str
    weight: float = 1.0
    max_slots: int | None = None


class Running(NamedTuple):  # a tuple: a pass builds one per live allocation (800 at scale)
    key: str  # allocation id
    job_id: str
    slots: int
    priority: int
    queue_position: float
    pool: str
    started: float  # start order; larger = newer
    weight: float = 1.0
    preemptible: bool = True
    max_slots: int | None = None
    placement: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (agent, slots) it holds
    preempting: bool = False  # already told to stop; its slots are promised to someone


_POOL = operator.attrgetter("pool")
_SLOTS = operator.attrgetter("slots")


@dataclass(frozen=True)
class AgentView:
    id: str
    pool: str
    slot_ids: tuple[int, ...]  # all slots of the agent
    used: frozenset[int] = frozenset()
    enabled: bool = True

    @property
    def free(self) -> tuple[int, ...]:
        return tuple(s for s in self.slot_ids if s not in self.used)


@dataclass(frozen=True)
class Assignment:
    key: int
    agent_id: str
    slots: tuple[int, ...]
    # For a trial spanning agents: every (agent, slots) part, chief first.
    parts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    backfilled: bool = False


class Wait(NamedTuple):
    """Why a request the pass looked at did not start, as the pass found it (`text` words it).
    `kind` is one of WAIT_WORDS' keys; `values` fill its words."""

    kind: str
    pool: str
    values: tuple[str | int, ...] = ()

    @property
    def text(self) -> str:
        return WAIT_WORDS[self.kind].format(*self.values, pool=self.pool)


WAIT_WORDS = {  # in words a user acts on (move a job, raise a priority, enable an agent)
    "priority": "behind job {0} (priority {1}) of higher priority",
    "queue": "behind job {0}, ahead in the queue",
    "full": "pool {pool} full: {0} of {0} slots in use",
    "short": "needs {0} slots: {1} of {2} free in pool {pool}",
    "spread": "needs {0} slots on one agent: at most {1} free on any",
    "whole": "needs {0} free agents of {1} slots: {2} free",
    "disabled": "slots disabled: {0} disabled",
    "preempting": "preempting {0} lower-priority allocation(s) to start",
    # a preemptive pool with allocations told to stop (by the pass, a searcher or a pause)
    "preemption": "pool {pool} full: waits for {0} preempted or stopping trial(s) to exit",
    # no preemption will come: the slots free as running trials end (some are stopping)
    "stopping": "pool {pool} full: waits for running trials to end ({0} stopping now)",
    "max_slots": "max_slots {0} of the experiment reached",
    "share": "fair share: its weight gives it {0} of {1} slots",
}


class Tail(NamedTuple):
    """Why the requests a pool's pass never looked at wait: behind `ahead` (the first request
    that waited), or else for `capacity`."""

    ahead: Request | None
    capacity: Wait | None

    def wait(self, job_id: str, priority: int, pool: str) -> Wait | None:
        """The wait of a job (its first request unread by the pass) of this pool."""
        ahead = self.ahead
        if ahead is not None and ahead.job_id != job_id:
            return _behind(ahead, priority, pool)
        return self.capacity


def _behind(ahead: Request, priority: int, pool: str) -> Wait:
    if ahead.priority < priority:
        return Wait("priority", pool, (ahead.job_id[:8], ahead.priority))
    return Wait("queue", pool, (ahead.job_id[:8],))


@dataclass(frozen=True)
class Decision:
    start: tuple[Assignment, ...] = ()
    preempt: tuple[str, ...] = ()
    # Requests that can never fit their pool as it is, with the reason to show on the job.
    unschedulable: dict[int, str] = field(default_factory=dict)
    # Why each job waits: its first request the pass looked at and did not start -> the wait.
    waits: dict[int, Wait] = field(default_factory=dict)
    # Per pool where the pass stopped before the end of the queue: why the rest wait.
    tails: dict[str, Tail] = field(default_factory=dict)


_ORDER = operator.attrgetter("priority", "queue_position", "key")


def order(requests: Iterable[Request]) -> list[Request]:
    return sorted(requests, key=_ORDER)


class Queue(Protocol):
    """The waiting requests as a pass reads them: per pool, one at a time in `order`. A pass
    takes only as many as it can use (once a pool's slots are taken, the rest of 100,000
    queued trials are never built); the queue kept between passes hands them over so
    (cluster/scheduling.py), and a list is wrapped as `Listed`."""

    def pools(self) -> Collection[str]:
        """The pools with requests."""
        ...

    def sizes(self, pool: str) -> Collection[int]:
        """The slot counts the pool's requests ask for (each once)."""
        ...

    def in_order(self, pool: str) -> Iterator[Request]:
        """The pool's requests, in `order`."""
        ...


class Listed:
    """Requests given as a list, as a `Queue` (sorted here unless `ordered`)."""

    def __init__(self, requests: Sequence[Request], ordered: bool = False) -> None:
        pools = set(map(_POOL, requests))  # most clusters have one pool: no split of 20,000
        if len(pools) == 1:
            self.by_pool = {pools.pop(): list(requests)}
        else:
            self.by_pool = {}
            for r in requests:
                self.by_pool.setdefault(r.pool, []).append(r)
        if not ordered:
            self.by_pool = {p: order(reqs) for p, reqs in self.by_pool.items()}

    def pools(self) -> Collection[str]:
        return self.by_pool.keys()

    def sizes(self, pool: str) -> Collection[int]:
        return set(map(_SLOTS, self.by_pool.get(pool, ())))

    def in_order(self, pool: str) -> Iterator[Request]:
        return iter(self.by_pool.get(pool, ()))


def schedule(
    requests: Sequence[Request] | Queue, agents: Sequence[AgentView],
    running: Sequence[Running] = (), policies: dict[str, PoolPolicy] | None = None,
    unread: dict[str, int] | None = None, ordered: bool = False,
) -> Decision:
    """One pass: what starts where, which allocations are preempted, and why requests that can
    never fit wait. `unread` is the slots more requests of a job would ask for, beyond those in
    `requests` (the caller reads only the first few of a job: no pass starts more trials than
    there are free slots); fair share counts them as demand. A list of `requests` is sorted
    unless `ordered` (in `order` already)."""
    policies = policies or {}
    queue = Listed(requests, ordered) if isinstance(requests, Sequence) else requests
    by_pool_agents: dict[str, list[AgentView]] = {}
    off_agents: dict[str, list[AgentView]] = {}  # disabled (or draining): why some wait
    for agent in agents:
        (by_pool_agents if agent.enabled else off_agents).setdefault(agent.pool, []).append(agent)
    start: list[Assignment] = []
    preempt: list[str] = []
    unschedulable: dict[int, str] = {}
    waits: dict[int, Wait] = {}
    tails: dict[str, Tail] = {}
    runs_by_pool: dict[str, list[Running]] = {}
    for run in running:
        runs_by_pool.setdefault(run.pool, []).append(run)
    for pool in sorted(set(queue.pools()) | runs_by_pool.keys()):
        members = by_pool_agents.get(pool, [])
        off = off_agents.get(pool, [])
        runs = runs_by_pool.get(pool, [])
        policy = policies.get(pool, PoolPolicy())
        shape = PoolShape.of(members)
        sizes = queue.sizes(pool)
        fitting: Iterable[Request]
        if members and max(sizes, default=0) <= shape.largest:
            fitting = queue.in_order(pool)  # taken as the pass goes
        else:  # in order: those that can never fit say why, the rest are tried
            fitting = []
            whole = PoolShape.of([*members, *off]) if off else shape
            for req in queue.in_order(pool):
                why = shape.never_fits(req)
                if why and off:  # it would fit with the agents enabled, or says why not
                    why = whole.never_fits(req) or _disabled(off, pool).text
                if why:
                    unschedulable[req.key] = why
                else:
                    fitting.append(req)
        free = FreeIndex(members)
        waiting = Waiting(pool, free, off, waits, sum(1 for r in runs if r.preempting),
                          policy.preemption or policy.scheduler == FAIR_SHARE)
        if policy.scheduler == FAIR_SHARE:
            s, p = _fair_share(list(fitting), free, runs, policy, unread or {}, waiting)
        else:
            s, p, tail = _priority(fitting, free, runs, policy, 0 in sizes, waiting)
            if tail is not None:
                tails[pool] = tail
        start += s
        preempt += p
    return Decision(tuple(start), tuple(preempt), unschedulable, waits, tails)


def _disabled(off: Sequence[AgentView], pool: str) -> Wait:
    names = ", ".join(a.id for a in off[:3]) + (f" and {len(off) - 3} more" if len(off) > 3
                                                 else "")
    return Wait("disabled", pool, (f"agent{'s' if len(off) > 1 else ''} {names}",))


@dataclass(frozen=True)
class PoolShape:
    """What a pool could ever hold: its agents' sizes and how many of each."""

    counts: dict[int, int]

    @property
    def largest(self) -> int:
        return max(self.counts, default=0)

    @classmethod
    def of(cls, members: Sequence[AgentView]) -> PoolShape:
        counts: dict[int, int] = {}
        for a in members:
            counts[len(a.slot_ids)] = counts.get(len(a.slot_ids), 0) + 1
        return cls(counts)

    def never_fits(self, req: Request) -> str | None:
        """Why `req` can never start on the pool's agents as they are (None: it can)."""
        if not self.counts:
            return f"no agent has joined resource pool '{req.pool}' yet"
        largest = max(self.counts)
        if req.slots <= largest:
            return None
        sizes = sorted((n for n in self.counts if n > 0), reverse=True)
        whole = [n for n in sizes if req.slots % n == 0]
        largest_is = f"the largest agent in pool {req.pool} has {largest}"
        if not whole:
            named = " or ".join(map(str, sizes[:4])) + (" or …" if len(sizes) > 4 else "")
            return (f"can never start here: needs {req.slots} slots on one agent or on whole "
                    f"agents; {largest_is}" + (f", and {req.slots} is not a multiple of {named}"
                                               if sizes else " slots"))
        n = whole[0]
        if self.counts[n] * n < req.slots:
            return (f"can never start here: needs {req.slots} slots on one agent or on "
                    f"{req.slots // n} whole agents of {n} slots; {largest_is}, and there "
                    f"{'is' if self.counts[n] == 1 else 'are'} only {self.counts[n]} "
                    f"agent{_s(self.counts[n])} of {n} slots")
        return None


def _s(n: int) -> str:
    return "" if n == 1 else "s"


# --- fitting --------------------------------------------------------------------------------


class FreeIndex:
    """Free slots per agent, bucketed by how many are free, so best fit costs O(slots per agent)
    instead of O(agents). Buckets are heaps with lazy deletion (stale entries are skipped)."""

    def __init__(self, members: Sequence[AgentView]) -> None:
        self.free: dict[str, list[int]] = {a.id: [s for s in a.slot_ids if s not in a.used]
                                           for a in members}
        self.size: dict[str, int] = {a.id: len(a.slot_ids) for a in members}
        self.total = sum(len(f) for f in self.free.values())  # free slots, all agents
        self.largest = max(self.size.values(), default=0)
        self.buckets: dict[int, list[str]] = {}
        for agent_id in sorted(self.free):
            self.buckets.setdefault(len(self.free[agent_id]), []).append(agent_id)

    def _peek(self, count: int) -> str | None:
        heap = self.buckets.get(count)
        while heap:
            if len(self.free[heap[0]]) == count:
                return heap[0]
            heapq.heappop(heap)
        return None

    def best(self, n: int) -> str | None:
        """The agent with the fewest free slots that still has `n` free."""
        for count in range(n, self.largest + 1):
            found = self._peek(count)
            if found is not None:
                return found
        return None

    def most_free(self) -> str | None:
        for count in range(self.largest, -1, -1):
            found = self._peek(count)
            if found is not None:
                return found
        return None

    def whole(self, n: int, count: int) -> list[str]:
        """`count` agents of size n with every slot free (fewest ids first), or []."""
        heap = self.buckets.get(n, [])
        valid = sorted({a for a in heap if len(self.free[a]) == n and self.size[a] == n})
        return valid[:count] if len(valid) >= count else []

    def take(self, agent_id: str, slots: tuple[int, ...]) -> None:
        before = len(self.free[agent_id])
        self.free[agent_id] = [s for s in self.free[agent_id] if s not in slots]
        self.total -= before - len(self.free[agent_id])
        heapq.heappush(self.buckets.setdefault(len(self.free[agent_id]), []), agent_id)

    def give(self, agent_id: str, slots: Iterable[int]) -> None:
        before = len(self.free.get(agent_id, []))
        self.free[agent_id] = sorted(set(self.free.get(agent_id, [])) | set(slots))
        self.total += len(self.free[agent_id]) - before
        heapq.heappush(self.buckets.setdefault(len(self.free[agent_id]), []), agent_id)

    def copy(self) -> FreeIndex:
        other = FreeIndex.__new__(FreeIndex)
        other.free = {k: list(v) for k, v in self.free.items()}
        other.size = dict(self.size)
        other.total = self.total
        other.largest = self.largest
        other.buckets = {k: list(v) for k, v in self.buckets.items()}
        return other


Parts = tuple[tuple[str, tuple[int, ...]], ...]


def fit(req: Request, index: FreeIndex) -> Parts | None:
    """Where the request goes: one agent (best fit), or whole free agents; None if not now."""
    if req.slots == 0:
        agent_id = index.most_free()
        return ((agent_id, ()),) if agent_id is not None else None
    if req.slots > index.total:
        return None  # (once the free slots are taken, the rest of 10,000 requests cost O(1))
    if req.slots <= index.largest:
        agent_id = index.best(req.slots)
        if agent_id is None:
            return None
        return ((agent_id, tuple(index.free[agent_id][: req.slots])),)
    sizes = sorted({n for n in index.size.values() if n and req.slots % n == 0})
    if not sizes:
        return None
    n = sizes[-1]
    whole = index.whole(n, req.slots // n)
    return tuple((a, tuple(index.free[a])) for a in whole) or None


def _take(index: FreeIndex, parts: Parts) -> None:
    for agent_id, slots in parts:
        index.take(agent_id, slots)


def _assignment(req: Request, parts: Parts, backfilled: bool = False) -> Assignment:
    agent_id, slots = parts[0]
    return Assignment(req.key, agent_id, slots, parts if len(parts) > 1 else (), backfilled)


class Waiting:
    """Why each job waits, recorded by a pool's pass as it goes (the pass's own reasons, not a
    second scheduler's): for each job, at its first request that does not start, behind the
    first job ahead of it that waits too, else for what the free slots lack."""

    def __init__(self, pool: str, free: FreeIndex, off: Sequence[AgentView],
                 waits: dict[int, Wait], stopping: int = 0, preemptive: bool = False) -> None:
        self.pool = pool
        self.free = free  # the pass's free slots, as it takes them
        self.off = off  # the pool's disabled agents
        self.waits = waits
        self.stopping = stopping  # the pool's allocations told to stop, not yet exited
        self.preemptive = preemptive  # the pool's pass preempts (so words a wait for one)
        self.jobs: set[str] = set()
        self.first: Request | None = None  # the first request that waited
        self.second: Request | None = None  # the first that waited of another job than first's

    def add(self, req: Request, why: Wait | None = None, behind: bool = True,
            in_flight: bool = False) -> None:
        """`req` did not start: for `why`, else behind a job ahead (`behind`), else for what
        the pool lacks now."""
        first = self.first
        if req.job_id not in self.jobs:
            self.jobs.add(req.job_id)
            ahead = first if first is not None and first.job_id != req.job_id else self.second
            if why is None and behind and ahead is not None:
                why = _behind(ahead, req.priority, self.pool)
            self.waits[req.key] = why or self.capacity(req, in_flight)
        if first is None:
            self.first = req
        elif self.second is None and req.job_id != first.job_id:
            self.second = req

    def tail(self, req: Request | None, in_flight: bool) -> Tail:
        """Why the requests from `req` on, which the pass does not look at, wait: behind the
        first that waited (else `req`'s job, which takes the next free slots)."""
        if req is None:
            return Tail(self.first, None)
        return Tail(self.first or req, self.capacity(req, in_flight))

    def capacity(self, req: Request, in_flight: bool = False) -> Wait:
        free, pool = self.free, self.pool
        if self.off and req.slots and fit(req, free) is None and \
                fit(req, _with(free, self.off)) is not None:
            return _disabled(self.off, pool)
        if in_flight and self.preemptive:
            return Wait("preemption", pool, (self.stopping,))
        total = sum(free.size.values())
        if not free.total:  # no preemption comes: what frees slots is trials ending
            return Wait("stopping", pool, (self.stopping,)) if self.stopping else \
                Wait("full", pool, (total,))
        if req.slots > free.total:
            return Wait("short", pool, (req.slots, free.total, total))
        if req.slots <= free.largest:
            return Wait("spread", pool, (req.slots, max(map(len, free.free.values()), default=0)))
        n = max((n for n in free.size.values() if n and req.slots % n == 0), default=1)
        whole = sum(1 for a, f in free.free.items() if free.size[a] == n and len(f) == n)
        return Wait("whole", pool, (req.slots // n, n, whole))


def _with(free: FreeIndex, more: Sequence[AgentView]) -> FreeIndex:
    """`free` with the free slots of the agents `more` too."""
    index = free.copy()
    for a in more:
        index.size[a.id] = len(a.slot_ids)
        index.free.setdefault(a.id, [])
        index.give(a.id, a.free)
    index.largest = max(index.size.values(), default=0)
    return index


# --- priority -------------------------------------------------------------------------------


def _priority(reqs: Iterable[Request], free: FreeIndex, runs: list[Running],
              policy: PoolPolicy, zero: bool, waiting: Waiting,
              ) -> tuple[list[Assignment], list[str], Tail | None]:
    """`reqs` in `order`, taken one at a time; `zero`: some of them ask for no slot. The tail:
    why those the pass stopped before wait (None: it went through them all)."""
    start: list[Assignment] = []
    preempt: list[str] = []
    victims: list[Running] | None = None  # sorted on first need: lowest priority, newest first
    blocked: int | None = None
    hopeless: list[tuple[int, int]] = []
    # A preemption already under way: wait for it to free its slots before choosing more.
    in_flight = any(r.preempting for r in runs)
    for req in reqs:
        if blocked is not None and req.priority != blocked and not policy.preemption:
            return start, preempt, waiting.tail(None, in_flight)  # nothing below it starts
        if not free.total and (in_flight or not policy.preemption) and not zero:
            # every slot is taken, none may be freed by preemption, all need slots
            return start, preempt, waiting.tail(req, in_flight)
        parts = fit(req, free)
        if parts is not None:
            start.append(_assignment(req, parts, backfilled=blocked not in (None, req.priority)))
            _take(free, parts)
            continue
        if blocked is None:
            blocked = req.priority
        if policy.preemption and not in_flight:
            if victims is None:
                victims = sorted((r for r in runs if r.preemptible and not r.preempting),
                                 key=lambda r: (-r.priority, -r.started))
            if not victims or victims[0].priority < req.priority:
                waiting.add(req)
                continue
            if any(n <= req.slots and p <= req.priority for n, p in hopeless):
                waiting.add(req)
                continue  # a smaller, more urgent request already found no victims
            chosen = _victims(req, free, victims)
            if not chosen:
                hopeless.append((req.slots, req.priority))
                waiting.add(req)
                continue
            preempt += [v.key for v in chosen]
            waiting.add(req, Wait("preempting", req.pool, (len(chosen),)))
            # One preemption per pool and pass: the freed slots are this request's, and the
            # next pass (when the victims have exited) goes on down the queue.
            return start, preempt, waiting.tail(None, in_flight)
        waiting.add(req, in_flight=in_flight)
    return start, preempt, None


def _victims(req: Request, free: FreeIndex, candidates: list[Running]) -> list[Running]:
    """Lower-priority (or same priority, queued later) running trials whose slots let `req` fit,
    lowest priority and newest first; [] if even all of them would not be enough. Only the
    victims on the agent(s) that end up holding the request are preempted."""
    single = req.slots <= free.largest
    gained: dict[str, set[int]] = {}
    on_agent: dict[str, list[Running]] = {}
    taken: list[Running] = []
    for victim in candidates:
        if victim.priority < req.priority or (
                victim.priority == req.priority and victim.queue_position <= req.queue_position):
            continue
        taken.append(victim)
        for agent_id, slots in victim.placement:
            if agent_id in free.size:
                gained.setdefault(agent_id, set()).update(slots)
                on_agent.setdefault(agent_id, []).append(victim)
                if single and len(free.free[agent_id]) + len(gained[agent_id]) >= req.slots:
                    return on_agent[agent_id]
        if not single and _fits_whole(req, free, gained):
            return taken
    return []


def _fits_whole(req: Request, free: FreeIndex, gained: dict[str, set[int]]) -> bool:
    trial = free.copy()
    for agent_id, slots in gained.items():
        trial.give(agent_id, slots)
    return fit(req, trial) is not None


# --- fair share -----------------------------------------------------------------------------


def shares(demand: dict[str, int], weight: dict[str, float], capacity: int) -> dict[str, int]:
    """Max-min progressive filling by weight: each round gives every unsatisfied job
    max(1, floor(remaining * w / sum(w))) slots, never beyond its demand."""
    given = {j: 0 for j in demand}
    remaining = capacity
    active = sorted(j for j, d in demand.items() if d > 0)
    while remaining > 0 and active:
        total_w = sum(weight[j] for j in active) or 1.0
        round_cap = remaining
        progressed = False
        for j in active:
            if remaining <= 0:
                break
            want = demand[j] - given[j]
            give = min(want, max(1, int(round_cap * weight[j] / total_w)), remaining)
            if give > 0:
                given[j] += give
                remaining -= give
                progressed = True
        active = [j for j in active if given[j] < demand[j]]
        if not progressed:
            break
    return given


def _fair_share(reqs: list[Request], free: FreeIndex, runs: list[Running], policy: PoolPolicy,
                unread: dict[str, int], waiting: Waiting) -> tuple[list[Assignment], list[str]]:
    capacity = sum(free.size.values())
    demand: dict[str, int] = {}
    weight: dict[str, float] = {}
    for r in [*reqs, *runs]:
        demand[r.job_id] = demand.get(r.job_id, 0) + r.slots
        weight[r.job_id] = max(r.weight, 1e-9)
    for job, slots in unread.items():
        if job in demand:
            demand[job] += slots
    caps = {r.job_id: r.max_slots for r in [*reqs, *runs] if r.max_slots is not None}
    for job, cap in caps.items():
        demand[job] = min(demand[job], cap)
    allotted = shares(demand, weight, capacity)
    used = {j: 0 for j in demand}
    for r in runs:
        used[r.job_id] += r.slots
    preempt = []
    for r in sorted(runs, key=lambda r: -r.started):
        if used[r.job_id] > allotted[r.job_id] and r.preemptible and not r.preempting:
            preempt.append(r.key)
            used[r.job_id] -= r.slots
    waiting.stopping += len(preempt)
    start = []
    for req in sorted(reqs, key=lambda r: (r.queue_position, r.key)):
        if used[req.job_id] + req.slots > allotted[req.job_id]:
            cap = caps.get(req.job_id)
            waiting.add(req, Wait("max_slots", req.pool, (cap,)) if cap is not None and
                        allotted[req.job_id] >= cap else
                        Wait("share", req.pool, (allotted[req.job_id], capacity)))
            continue
        if preempt:
            waiting.add(req, behind=False, in_flight=True)
            continue
        parts = fit(req, free)
        if parts is None:
            waiting.add(req, behind=False)
            continue
        start.append(_assignment(req, parts))
        _take(free, parts)
        used[req.job_id] += req.slots
    return start, preempt
