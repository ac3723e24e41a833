"""The pure scheduling pass: a table of cases."""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator

import pytest

from dettui.master.cluster.scheduling import Kept
from dettui.master.cluster.scheduling import KeptQueue as Waiting
from dettui.master.scheduler import (
    FAIR_SHARE,
    AgentView,
    Assignment,
    PoolPolicy,
    Request,
    Running,
    order,
    schedule,
    shares,
)
from dettui.master.store.queue_reads import Read
from dettui.master.store.records import Job
from dettui.models import ExperimentState


def req(key: int, slots: int = 1, priority: int = 42, pos: float | None = None,
        pool: str = "default", job: str | None = None, weight: float = 1.0,
        max_slots: int | None = None) -> Request:
    return Request(key, job or f"job{key}", slots, priority,
                   pos if pos is not None else float(key), pool, weight, max_slots)


def agent(aid: str, n: int, used: tuple[int, ...] = (), pool: str = "default",
          enabled: bool = True) -> AgentView:
    return AgentView(aid, pool, tuple(range(n)), frozenset(used), enabled)


def run(key: str, agent_id: str, slots: tuple[int, ...], priority: int = 42,
        started: float = 0.0, pos: float = 0.0, job: str | None = None,
        weight: float = 1.0) -> Running:
    return Running(key, job or f"job-{key}", len(slots), priority, pos, "default", started,
                   weight, placement=((agent_id, slots),))


PREEMPT = {"default": PoolPolicy(preemption=True)}
FAIR = {"default": PoolPolicy(scheduler=FAIR_SHARE)}

CASES = [
    ("fifo fills the agent", [req(1), req(2), req(3)], [agent("a", 2)], [], None,
     [Assignment(1, "a", (0,)), Assignment(2, "a", (1,))], []),
    ("priority beats queue order", [req(1, priority=50), req(2, priority=10)], [agent("a", 1)],
     [], None, [Assignment(2, "a", (0,))], []),
    ("queue position breaks ties", [req(1, pos=9.0), req(2, pos=1.0)], [agent("a", 1)], [],
     None, [Assignment(2, "a", (0,))], []),
    ("gang: all slots on one agent or nothing", [req(1, slots=2)],
     [agent("a", 2, used=(0,)), agent("b", 2, used=(1,))], [], None, [], []),
    ("used slots are skipped", [req(1)], [agent("a", 2, used=(0,))], [], None,
     [Assignment(1, "a", (1,))], []),
    ("best fit prefers the fuller agent", [req(1)],
     [agent("a", 4), agent("b", 4, used=(0, 1, 2))], [], None, [Assignment(1, "b", (3,))], []),
    ("a smaller job at the same priority starts past a big one",
     [req(1, slots=2), req(2, slots=1)], [agent("a", 2, used=(0,))], [], None,
     [Assignment(2, "a", (1,))], []),
    ("no preemption: nothing below a blocked priority starts",
     [req(1, slots=2, priority=10), req(2, slots=1, priority=50)], [agent("a", 2, used=(0,))],
     [], None, [], []),
    ("preemption on: smaller lower-priority jobs backfill",
     [req(1, slots=2, priority=10), req(2, slots=1, priority=50)], [agent("a", 2, used=(0,))],
     [], PREEMPT, [Assignment(2, "a", (1,), backfilled=True)], []),
    ("preemption on: a blocked urgent job preempts the newest lower-priority trial",
     [req(1, priority=1)], [agent("a", 2, used=(0, 1))],
     [run("old", "a", (0,), started=1), run("new", "a", (1,), started=2)], PREEMPT, [],
     ["new"]),
    ("preemption on: lowest priority goes first",
     [req(1, priority=1)], [agent("a", 2, used=(0, 1))],
     [run("p50", "a", (0,), priority=50, started=1), run("p42", "a", (1,), started=2)],
     PREEMPT, [], ["p50"]),
    ("preemption on: more urgent trials are never victims",
     [req(1, priority=30)], [agent("a", 1, used=(0,))],
     [run("urgent", "a", (0,), priority=10)], PREEMPT, [], []),
    ("preemption off: running trials are never preempted",
     [req(1, priority=1)], [agent("a", 1, used=(0,))], [run("r", "a", (0,))], None, [], []),
    ("preemption frees enough slots for a 2-slot gang",
     [req(1, slots=2, priority=1)], [agent("a", 2, used=(0, 1))],
     [run("x", "a", (0,), started=1), run("y", "a", (1,), started=2)], PREEMPT, [],
     ["y", "x"]),
    ("multi-agent: whole agents for a trial bigger than one agent", [req(1, slots=4)],
     [agent("a", 2), agent("b", 2), agent("c", 2, used=(0,))], [], None,
     [Assignment(1, "a", (0, 1), (("a", (0, 1)), ("b", (0, 1))))], []),
    ("multi-agent: partly used agents do not count", [req(1, slots=4)],
     [agent("a", 2), agent("b", 2, used=(1,))], [], None, [], []),
    ("pools are separate", [req(1, pool="gpu"), req(2)],
     [agent("a", 1), agent("g", 1, pool="gpu")], [], None,
     [Assignment(2, "a", (0,)), Assignment(1, "g", (0,))], []),
    ("disabled agents get nothing", [req(1)], [agent("a", 2, enabled=False)], [], None, [], []),
    ("zero-slot trials run without slots", [req(1, slots=0)], [agent("a", 1, used=(0,))], [],
     None, [Assignment(1, "a", ())], []),
    ("fair share: equal weights split the slots", [req(1, job="A"), req(2, job="A"),
                                                   req(3, job="B"), req(4, job="B")],
     [agent("a", 2)], [], FAIR, [Assignment(1, "a", (0,)), Assignment(3, "a", (1,))], []),
    ("fair share: a job over its share is preempted", [req(3, job="B")],
     [agent("a", 2, used=(0, 1))],
     [run("a1", "a", (0,), job="A", started=1), run("a2", "a", (1,), job="A", started=2)],
     FAIR, [], ["a2"]),
]


@pytest.mark.parametrize(("name", "requests", "agents", "running", "policies", "start",
                          "preempt"), CASES, ids=[c[0] for c in CASES])
def test_schedule(name: str, requests: list[Request], agents: list[AgentView],
                  running: list[Running], policies: dict[str, PoolPolicy] | None,
                  start: list[Assignment], preempt: list[str]) -> None:
    decision = schedule(requests, agents, running, policies)
    assert list(decision.start) == start
    assert list(decision.preempt) == preempt


@pytest.mark.parametrize(("demand", "weight", "capacity", "expected"), [
    ({"a": 4, "b": 4}, {"a": 1, "b": 1}, 4, {"a": 2, "b": 2}),
    ({"a": 8, "b": 8}, {"a": 3, "b": 1}, 8, {"a": 6, "b": 2}),
    ({"a": 1, "b": 8}, {"a": 1, "b": 1}, 8, {"a": 1, "b": 7}),
    ({"a": 0, "b": 3}, {"a": 1, "b": 1}, 8, {"a": 0, "b": 3}),
])
def test_fair_shares_are_max_min_by_weight(demand: dict[str, int], weight: dict[str, float],
                                           capacity: int, expected: dict[str, int]) -> None:
    assert shares(demand, weight, capacity) == expected


def test_fair_share_honours_max_slots() -> None:
    decision = schedule([req(1, job="A", max_slots=1), req(2, job="A", max_slots=1)],
                        [agent("a", 4)], [], FAIR)
    assert [a.key for a in decision.start] == [1]


@pytest.mark.parametrize(("request_", "agents", "reason"), [
    (req(1, slots=4), [agent("a", 2)],
     "can never start here: needs 4 slots on one agent or on 2 whole agents of 2 slots; the "
     "largest agent in pool default has 2, and there is only 1 agent of 2 slots"),
    (req(1, slots=3), [agent("a", 2), agent("b", 2)],
     "can never start here: needs 3 slots on one agent or on whole agents; the largest agent "
     "in pool default has 2, and 3 is not a multiple of 2"),
    (req(1, pool="tpu"), [agent("a", 2)], "no agent has joined resource pool 'tpu' yet"),
])
def test_requests_that_can_never_fit_are_reported(
    request_: Request, agents: list[AgentView], reason: str
) -> None:
    decision = schedule([request_], agents)
    assert decision.start == ()
    assert decision.unschedulable[1] == reason


def test_no_new_victims_while_a_preemption_is_under_way() -> None:
    busy = [agent("a", 2, used=(0, 1))]
    told = Running("old", "job-old", 1, 42, 0.0, "default", 1.0, placement=(("a", (0,)),),
                   preempting=True)
    other = run("other", "a", (1,), started=2)
    decision = schedule([req(1, priority=1)], busy, [told, other], PREEMPT)
    assert decision.preempt == () and decision.start == ()


def test_fair_share_counts_the_demand_of_requests_not_read() -> None:
    """The pass reads only the first trials of a job; the rest still weigh in its share. A and
    B each want 4 slots of 4: 2 each, though only one request of B was read."""
    reqs = [req(1, job="A"), req(2, job="A"), req(3, job="A"), req(4, job="A"), req(5, job="B")]
    alone = schedule(reqs, [agent("a", 4)], [], FAIR)
    assert sorted(a.key for a in alone.start) == [1, 2, 3, 5]
    shared = schedule(reqs, [agent("a", 4)], [], FAIR, unread={"B": 3})
    assert sorted(a.key for a in shared.start) == [1, 2, 5]


def test_the_free_index_counts_its_free_slots_through_takes_gives_and_copies() -> None:
    """`FreeIndex.total` lets `fit` refuse in O(1) once a pass has taken every free slot (the
    other 10,000 requests of a full cluster cost a best-fit search each before)."""
    import random

    from dettui.master.scheduler import FreeIndex, fit

    rng = random.Random(5)
    agents = [AgentView(f"a{i}", "default", tuple(range(4)), frozenset(rng.sample(range(4), i)))
              for i in range(5)]
    index = FreeIndex(agents)
    for _ in range(300):
        assert index.total == sum(len(f) for f in index.free.values())
        agent_id = rng.choice(sorted(index.free))
        if rng.random() < 0.5 and index.free[agent_id]:
            index.take(agent_id, tuple(rng.sample(index.free[agent_id], 1)))
        else:
            index.give(agent_id, [rng.randrange(4)])
        index = index.copy() if rng.random() < 0.1 else index
    full = FreeIndex([AgentView("a", "default", (0, 1), frozenset({0, 1}))])
    assert full.total == 0
    assert fit(req(1), full) is None
    assert fit(req(2, slots=0), full) == (("a", ()),)  # zero-slot: still fits


def _job(exp_id: int, priority: int, position: float, slots: int = 1) -> Job:
    return Job(exp_id, f"job-{exp_id}", ExperimentState.ACTIVE, "default", priority, 1.0, None,
               position, slots)


def _read(jobs: dict[int, Job], heads: dict[int, list[int]], whole: bool,
          ids: set[int] | None = None) -> Read:
    return Read(whole, set(jobs) if ids is None else ids, jobs, heads,
                {e: len(h) + 2 for e, h in heads.items()}, 64)


@pytest.mark.parametrize("seed", range(5))
def test_the_kept_queue_hands_requests_over_in_order(seed: int) -> None:
    """The queue kept between passes keeps its jobs in the scheduler's order as they come,
    change priority and go, so a pass hands over its requests sorted (ties between jobs queued
    at the same place go by trial id): the same requests, in the same order, as sorting them,
    and the same decision as a pass that sorts."""
    rng = random.Random(seed)
    kept = Waiting()
    jobs: dict[int, Job] = {}
    heads: dict[int, list[int]] = {}
    next_trial = iter(range(1, 10**6))

    def new_job(exp_id: int) -> None:
        jobs[exp_id] = _job(exp_id, rng.choice((10, 42, 42, 50)), float(rng.randrange(6)),
                            rng.choice((1, 1, 2)))
        heads[exp_id] = [next(next_trial) for _ in range(rng.randrange(1, 4))]

    for exp_id in range(1, 40):
        new_job(exp_id)
    kept.apply(_read(dict(jobs), dict(heads), whole=True), 0.0)
    for _ in range(60):
        changed = set(rng.sample(sorted(jobs), 3)) | {max(jobs) + 1}
        for exp_id in changed:
            if exp_id in jobs and rng.random() < 0.3:
                del jobs[exp_id], heads[exp_id]  # ended
            else:
                new_job(exp_id)  # new, or its priority, place or trials changed
        kept.apply(_read({e: jobs[e] for e in changed if e in jobs},
                         {e: heads[e] for e in changed if e in heads}, False, changed), 0.0)
        for per_job in (1, 2, 64):
            got = kept.requests(per_job)
            assert got == order(got)
            assert sorted(r.key for r in got) == sorted(t for h in heads.values()
                                                        for t in h[:per_job])
            assert [r for r in kept.queue(per_job).in_order("default")] == got
            agents = [agent(f"a{i}", 2, used=tuple(range(rng.randrange(3)))) for i in range(4)]
            assert schedule(got, agents, ordered=True) == schedule(got[::-1], agents)
            assert schedule(kept.queue(per_job), agents) == schedule(got[::-1], agents)


def test_a_full_pool_ends_the_pass_early_with_the_same_decision() -> None:
    """Once every slot is taken nothing more can start: a pass stops there (with 100,000
    queued trials it used to try every one)."""
    reqs = [req(i, slots=1 + i % 2) for i in range(1, 2001)]
    agents = [agent("a", 4), agent("b", 2, used=(0,))]
    decision = schedule(reqs, agents, ordered=True)
    assert [a.key for a in decision.start] == [1, 2, 3]
    assert decision == schedule(reqs[:10], agents, ordered=True)
    # a zero-slot trial further on needs no slot: it still starts
    late = schedule([*reqs, req(5000, slots=0)], agents, ordered=True)
    assert [a.key for a in late.start] == [1, 2, 3, 5000]


class Counted:
    """A kept queue that counts the requests a pass takes from it."""

    def __init__(self, queue: Kept) -> None:
        self.queue = queue
        self.taken = 0

    def pools(self) -> Collection[str]:
        return self.queue.pools()

    def sizes(self, pool: str) -> Collection[int]:
        return self.queue.sizes(pool)

    def in_order(self, pool: str) -> Iterator[Request]:
        for r in self.queue.in_order(pool):
            self.taken += 1
            yield r


@pytest.mark.parametrize("pools", [("default",), ("default", "gpu")])
def test_a_pass_over_the_kept_queue_takes_only_the_requests_it_can_use(
        pools: tuple[str, ...]) -> None:
    """10,000 jobs of 10 queued trials wait and 3 slots are free: the pass takes a handful of
    requests, not 100,000 (it built every one, 12 ms of CPU a pass), with the same decision as
    a pass over all of them."""
    kept = Waiting()
    jobs = {e: Job(e, f"job-{e}", ExperimentState.ACTIVE, pools[e % len(pools)], 42, 1.0, None,
                   float(e), 1) for e in range(1, 10_001)}
    heads = {e: list(range(e * 10, e * 10 + 10)) for e in jobs}
    kept.apply(Read(True, set(jobs), jobs, heads, {e: 10 for e in jobs}, 64), 0.0)
    agents = [agent(f"a{i}", 8, used=tuple(range(8 if i else 5)), pool=p)
              for p in pools for i in range(4)]
    per_job = 3 * len(pools) + 1
    counted = Counted(kept.queue(per_job))
    decision = schedule(counted, agents)
    assert len(decision.start) == 3 * len(pools)
    assert counted.taken <= 2 * per_job * len(pools)
    assert decision == schedule(kept.requests(per_job), agents, ordered=True)
    # a job that can never fit is still told why, wherever it waits
    big = Job(20_000, "job-big", ExperimentState.ACTIVE, pools[0], 42, 1.0, None, 20_000.0, 12)
    kept.apply(Read(False, {20_000}, {20_000: big}, {20_000: [999_999]}, {20_000: 1}, 64), 0.0)
    decision = schedule(kept.queue(per_job), agents)
    assert "can never start here: needs 12 slots" in decision.unschedulable[999_999]
    assert kept.shapes[(pools[0], 12)] == 1
    kept.apply(Read(False, {20_000}, {}, {}, {}, 64), 0.0)  # it ended
    assert (pools[0], 12) not in kept.shapes
    assert kept.any_unread(per_job) and not kept.any_unread(10)
