"""Why a job waits, in words that say what will happen (issue 33, fix round Z1/Z2): a pool
without preemption never promises one, and a trial that can never fit says so."""

from __future__ import annotations

import pytest

from dettui.master.scheduler import (
    FAIR_SHARE,
    AgentView,
    PoolPolicy,
    Request,
    Running,
    Wait,
    schedule,
)


def full_agent(n: int = 3) -> AgentView:
    return AgentView("a", "default", tuple(range(n)), frozenset(range(n)))


def runs(stopping: int, n: int = 3) -> list[Running]:
    """`n` one-slot allocations on agent a, the first `stopping` of them told to stop (by a
    searcher, a pause or a preemption)."""
    return [Running(f"r{i}", f"job-r{i}", 1, 42, 0.0, "default", float(i),
                    placement=(("a", (i,)),), preempting=i < stopping) for i in range(n)]


def wait_of(policy: PoolPolicy, stopping: int) -> Wait:
    decision = schedule([Request(1, "job1", 1, 42, 1.0, "default")], [full_agent()],
                        runs(stopping), {"default": policy})
    assert decision.start == () and decision.preempt == ()
    if 1 in decision.waits:
        return decision.waits[1]
    wait = decision.tails["default"].wait("job1", 42, "default")
    assert wait is not None
    return wait


def test_a_pool_without_preemption_waits_for_running_trials_to_end() -> None:
    """The user's case: a searcher stopped a trial on a master without --preemption; the job
    behind it was told it waits for a preemption that will never come."""
    wait = wait_of(PoolPolicy(), stopping=1)
    assert wait.text == "pool default full: waits for running trials to end (1 stopping now)"
    assert "preempt" not in wait.text
    assert wait_of(PoolPolicy(), stopping=0).text == "pool default full: 3 of 3 slots in use"


def test_a_preemptive_pool_names_the_preemption_under_way() -> None:
    wait = wait_of(PoolPolicy(preemption=True), stopping=2)
    assert wait.text == "pool default full: waits for 2 preempted or stopping trial(s) to exit"


def test_a_fair_share_pool_that_preempts_counts_what_it_stops() -> None:
    """Job A holds 3 slots of 3; B's share is half: the pass preempts one of A's, and B waits
    for it."""
    running = [Running(f"r{i}", "A", 1, 42, 0.0, "default", float(i),
                       placement=(("a", (i,)),)) for i in range(3)]
    decision = schedule([Request(9, "B", 1, 42, 9.0, "default")], [full_agent()], running,
                        {"default": PoolPolicy(scheduler=FAIR_SHARE)})
    assert len(decision.preempt) == 1
    assert decision.waits[9].text == \
        "pool default full: waits for 1 preempted or stopping trial(s) to exit"


@pytest.mark.parametrize(("slots", "sizes", "reason"), [
    (4, (3,), "can never start here: needs 4 slots on one agent or on whole agents; the "
              "largest agent in pool default has 3, and 4 is not a multiple of 3"),
    (7, (3, 2), "can never start here: needs 7 slots on one agent or on whole agents; the "
                "largest agent in pool default has 3, and 7 is not a multiple of 3 or 2"),
    (4, (2,), "can never start here: needs 4 slots on one agent or on 2 whole agents of 2 "
              "slots; the largest agent in pool default has 2, and there is only 1 agent of "
              "2 slots"),
    (12, (4, 4), "can never start here: needs 12 slots on one agent or on 3 whole agents of 4 "
                 "slots; the largest agent in pool default has 4, and there are only 2 agents "
                 "of 4 slots"),
    (4, (0,), "can never start here: needs 4 slots on one agent or on whole agents; the "
              "largest agent in pool default has 0 slots"),
])
def test_a_trial_too_big_for_every_agent_can_never_start_here(
        slots: int, sizes: tuple[int, ...], reason: str) -> None:
    agents = [AgentView(f"a{i}", "default", tuple(range(n))) for i, n in enumerate(sizes)]
    decision = schedule([Request(1, "job1", slots, 42, 1.0, "default")], agents)
    assert decision.start == ()
    assert decision.unschedulable == {1: reason}


def test_many_agent_sizes_are_named_with_a_cap() -> None:
    agents = [AgentView(f"a{n}", "default", tuple(range(n))) for n in range(3, 40, 2)]
    reason = schedule([Request(1, "j", 1024, 42, 1.0, "default")], agents).unschedulable[1]
    assert reason.endswith("1024 is not a multiple of 39 or 37 or 35 or 33 or …")
    assert len(reason) < 200
