"""The queue the scheduler keeps between passes, on a real master under churn: an agent runs
and ends trials as fast as it gets them (some fail and go back to the queue), while experiments
are paused, resumed, reprioritised, killed and created. Every trial gets its slots within
seconds of one freeing (no stale entry starves the queue until the next whole read), and after
each round the kept queue is what a whole read of the store says."""

from __future__ import annotations

import time
from typing import Any

from dettui.master.cluster.scheduling import KeptQueue as Waiting
from dettui.master.http import appkeys
from dettui.master.store import queue_reads as waiting_store
from dettui.master.store import trials as trial_store
from tests.master.conftest import Api, agent_headers
from tests.master.test_api import create

GRID = """
name: churn
entrypoint: python3 train.py
searcher: {name: grid, metric: loss, max_concurrent_trials: 0}
hyperparameters: {x: {type: categorical, vals: [1, 2, 3, 4, 5, 6]}}
max_restarts: 1
"""


async def _check_kept(api: Api) -> None:
    """Between passes, the kept queue equals a whole read, but for the experiments the store
    marked since the last pass (the next one reads those again)."""
    app = api.client.server.app
    scheduling = app[appkeys.CLUSTER].scheduling
    kept, seen = scheduling.waiting, scheduling.watch
    if seen is None:  # PostgreSQL: every pass reads the whole queue anyway
        return
    per_job = 2
    async with scheduling.passing:
        also, limit, _ = kept.wants(per_job, time.monotonic())

        def whole(conn: Any) -> tuple[set[int], waiting_store.Read, Any, Any]:
            return (set(seen.changed), waiting_store.read(conn, None, (), limit, whole=True),
                    waiting_store.running(conn, seen), waiting_store.running(conn))

        marked, read, (live, live_of), (all_live, all_of) = await app[appkeys.DB].run(whole)
        assert {a.id: a for a in live} == {a.id: a for a in all_live}  # kept too
        assert live_of == all_of
        fresh = Waiting()
        fresh.apply(read, 0.0)
        for exp_id in (set(fresh.jobs) | set(kept.jobs)) - marked - set(also):
            assert kept.jobs.get(exp_id) == fresh.jobs.get(exp_id), exp_id
            assert kept.counts.get(exp_id) == fresh.counts.get(exp_id), exp_id
            assert kept.heads.get(exp_id, ())[:per_job] == fresh.heads.get(exp_id, ())[:per_job]


async def test_under_churn_every_trial_starts_and_the_kept_queue_stays_true(api: Api) -> None:
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": i, "type": "cpu"} for i in range(3)],
        "runningAllocations": []}, headers=agent)
    exps = [(await create(api, GRID))["experiment"]["id"] for _ in range(6)]
    db = api.client.server.app[appkeys.DB]
    ended = 0
    deadline = time.monotonic() + 90
    n = 0
    while time.monotonic() < deadline:
        n += 1
        got = await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=5", headers=agent)
        work: list[dict[str, Any]] = got["work"]
        for w in work:
            if w["kind"] != "start":
                continue
            code = 1 if (w["trialId"] + w["runId"]) % 3 == 0 else 0  # some fail, run again
            await api.call("POST", f"/api/v1/agents/a1/allocations/{w['allocationId']}/exit",
                           {"exitCode": code, "reason": ""}, headers=agent)
            ended += 1
        for w in work:
            if w["kind"] == "kill":
                await api.call("POST",
                               f"/api/v1/agents/a1/allocations/{w['allocationId']}/exit",
                               {"exitCode": 137, "reason": "killed"}, headers=agent)
        # the queue runs the oldest first: change the newest ones while they wait
        if n == 1:
            await api.call("POST", f"/api/v1/experiments/{exps[5]}/pause")
            await api.call("PATCH", f"/api/v1/experiments/{exps[4]}", {"description": "x"})
        if n == 2:
            await api.call("POST", f"/api/v1/experiments/{exps[4]}/kill")
            jobs = (await api.call("GET", "/api/v1/job-queues-v2?includeIdle=true"))["jobs"]
            job_id = next(j["full"]["jobId"] for j in jobs
                          if j["full"]["entityId"] == str(exps[3]))
            await api.call("POST", "/api/v1/job-queues",
                           {"updates": [{"jobId": job_id, "priority": 1}]})
        if n == 4:
            await api.call("POST", f"/api/v1/experiments/{exps[5]}/activate")
            exps.append((await create(api, GRID))["experiment"]["id"])
        await _check_kept(api)
        states = {e: (await api.call("GET", f"/api/v1/experiments/{e}"))["experiment"]["state"]
                  for e in exps}
        if n > 4 and all(s in ("STATE_COMPLETED", "STATE_CANCELED", "STATE_KILLED",
                               "STATE_ERROR") for s in states.values()):
            break
    else:
        raise AssertionError(f"trials still waiting after 90 s: {states}")
    assert ended >= 6 * 4
    assert await db.run(trial_store.live_allocations) == []


async def test_with_no_agent_each_job_says_why_and_a_page_looks_up_no_trial(
        api: Api, monkeypatch: Any) -> None:
    """With no agent joined, every job's first trial waits with a reason. A page of the queue
    finds each such trial's experiment in what the scheduler read, not one store lookup per
    trial (10,000 of them at lab scale, on every page and every stream re-read)."""
    import asyncio

    for _ in range(3):
        await create(api)
    app = api.client.server.app
    scheduling = app[appkeys.CLUSTER].scheduling
    deadline = time.monotonic() + 10
    while len(scheduling.waiting_reasons()) < 3 and time.monotonic() < deadline:
        app[appkeys.CLUSTER].kick()
        await asyncio.sleep(0.05)
    looked_up: list[list[int]] = []
    real = trial_store.experiment_ids

    def recorded(conn: Any, ids: list[int]) -> dict[int, int]:
        looked_up.append(list(ids))
        return real(conn, ids)

    monkeypatch.setattr(trial_store, "experiment_ids", recorded)
    jobs = (await api.call("GET", "/api/v1/job-queues-v2"))["jobs"]
    assert [j["full"]["unschedulableReason"] for j in jobs] == [
        "no agent has joined resource pool 'default' yet"] * 3
    assert looked_up == []
