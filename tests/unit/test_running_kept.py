"""A scheduling pass's view of the running allocations (`scheduling._running`): kept from the
last pass where nothing it was made of changed, made again where anything did, and always
what a fresh build gives."""

from __future__ import annotations

from dettui.master.cluster.scheduling import Weighed, _running
from dettui.master.store.records import Allocation, Job
from dettui.models import AllocationState, ExperimentState


def _alloc(n: int, trial: int, parts: list[tuple[str, list[int]]], **kw: object) -> Allocation:
    fields: dict[str, object] = dict(
        id=f"1.{n}.1", trial_id=trial, run_id=1, state=AllocationState.RUNNING, token_hash="h",
        agent_id=parts[0][0], slots=parts[0][1], start_time=float(n), end_time=None,
        exit_code=None, exit_reason=None, preempt_requested=False, preempt_acked=False,
        kill_requested=False, parts=parts, part_exits={}, port=None)
    fields.update(kw)
    return Allocation(**fields)  # type: ignore[arg-type]


def _job(exp: int, priority: int = 42, state: ExperimentState = ExperimentState.ACTIVE) -> Job:
    return Job(exp, f"job-{exp}", state, "default", priority, 1.0, None, float(exp), 1)


def test_a_running_allocation_is_weighed_again_only_when_something_of_it_changed() -> None:
    live = [_alloc(i, 100 + i, [(f"a{i % 3}", [i % 8])]) for i in range(6)]
    live.append(_alloc(9, 109, [("a0", [5]), ("a1", [6])]))
    experiment_of = {100 + i: 1 + i % 2 for i in range(6)} | {109: 2}
    jobs = {1: _job(1), 2: _job(2)}
    made: Weighed = {}
    first = _running(live, experiment_of, jobs, set(), made)
    assert first == _running(live, experiment_of, jobs, set())  # the same as made afresh
    assert first[-1].placement == (("a0", (5,)), ("a1", (6,)))
    again = _running(live, experiment_of, jobs, set(), made)
    assert all(a is b for a, b in zip(first, again, strict=True))  # kept, not made again

    # a job's priority, an allocation's record, a preemption: each made again, only those
    jobs[2] = _job(2, priority=7)
    live[0] = _alloc(0, 100, [("a0", [3])])
    preempting = {live[2].id}
    third = _running(live, experiment_of, jobs, preempting, made)
    assert third == _running(live, experiment_of, jobs, preempting)
    remade = {r.key for r, old in zip(third, again, strict=True) if r is not old}
    assert remade == {live[0].id, live[2].id} | {
        a.id for a in live if experiment_of[a.trial_id] == 2}
    assert next(r for r in third if r.key == live[2].id).preempting
    assert {r.priority for r in third if r.job_id == "job-2"} == {7}

    # a killed allocation, a paused job: out of the list and out of what is kept
    live[1] = _alloc(1, 101, [("a1", [1])], kill_requested=True)
    jobs[1] = _job(1, state=ExperimentState.PAUSED)
    fourth = _running(live, experiment_of, jobs, preempting, made)
    assert fourth == _running(live, experiment_of, jobs, preempting)
    assert {r.job_id for r in fourth} == {"job-2"}
    assert set(made) == {r.key for r in fourth}
