"""Why each waiting job waits (issue 33, item 5): on a real master, each case as the job queue
answers it (`waitReason`), and over many random queues that the reasons are the scheduling
pass's own: every request it did not start has one, none it started has, and a job said to
wait behind another waits behind one that did not start either."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from dettui.master.http import appkeys
from dettui.master.scheduler import (
    FAIR_SHARE,
    AgentView,
    PoolPolicy,
    Request,
    Running,
    Wait,
    schedule,
)
from dettui.master.settings import MasterSettings
from dettui.master.store import trials as trial_store
from tests.master.conftest import SIMPLE_CONFIG, Api, agent_headers
from tests.master.test_api import create
from tests.poll import until_async

GRID = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: grid, metric: loss, max_concurrent_trials: 0}}
hyperparameters: {{x: {{type: categorical, vals: [1, 2, 3]}}}}
resources: {{{resources}}}
"""


def single(name: str, resources: str = "") -> str:
    return SIMPLE_CONFIG.replace("name: t", f"name: {name}") + f"resources: {{{resources}}}\n"


async def master(master_settings: MasterSettings, aiohttp_client: Any,
                 policy: PoolPolicy | None = None) -> Api:
    from dettui.master.app import create_app

    settings = replace(master_settings, policies={"default": policy or PoolPolicy()})
    client = await aiohttp_client(create_app(settings))
    resp = await client.post("/api/v1/auth/login", json={"username": "determined"})
    return Api(client, (await resp.json())["token"])


async def join(api: Api, agent_id: str, slots: int) -> None:
    await api.call("POST", "/api/v1/agents/register", {
        "id": agent_id, "slots": [{"id": i, "type": "cpu"} for i in range(slots)],
        "runningAllocations": []}, headers=await agent_headers(api))


async def jobs(api: Api) -> dict[str, dict[str, Any]]:
    got = (await api.call("GET", "/api/v1/job-queues-v2?includeIdle=true"))["jobs"]
    return {j["full"]["name"]: j["full"] for j in got}


async def until_reasons(api: Api, want: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """The queue once each named job's waitReason is as wanted (the pass runs on a kick)."""
    def reasons(got: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {n: got[n].get("waitReason") if n in got else "(absent)" for n in want}

    got = await until_async(lambda: jobs(api), f"wait reasons {want}", timeout=15,
                            done=lambda got: reasons(got) == want)
    return got


HUGE = ("can never start here: needs 4 slots on one agent or on 2 whole agents of 2 slots; the "
        "largest agent in pool default has 2, and there is only 1 agent of 2 slots")


def short(got: dict[str, dict[str, Any]], name: str) -> str:
    return str(got[name]["jobId"])[:8]


async def test_behind_a_more_urgent_job_or_one_ahead_and_a_full_pool(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    api = await master(master_settings, aiohttp_client)
    await join(api, "a1", 1)
    await create(api, single("running"))
    await until_async(lambda: jobs(api), "the first job to start",
                      done=lambda g: g["running"]["summary"]["state"] == "STATE_SCHEDULED")
    await create(api, single("urgent", "priority: 10"))
    await create(api, single("later"))
    await create(api, single("urgent2", "priority: 10"))
    got = await jobs(api)
    urgent = short(got, "urgent")
    await until_reasons(api, {
        "running": None,
        "urgent": "pool default full: 1 of 1 slots in use",
        "urgent2": f"behind job {urgent}, ahead in the queue",
        "later": f"behind job {urgent} (priority 10) of higher priority"})


async def test_a_two_slot_job_behind_one_slot_trials_says_why(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    """The case that had no why: a 2-slot job behind a job whose 1-slot trials take each slot
    as it frees."""
    api = await master(master_settings, aiohttp_client)
    await join(api, "a1", 2)
    await create(api, GRID.format(name="ones", resources=""))  # 3 trials, 2 start
    await until_async(lambda: jobs(api), "two trials to start",
                      done=lambda g: g["ones"]["allocatedSlots"] == 2)
    await create(api, single("two", "slots_per_trial: 2"))
    got = await jobs(api)
    await until_reasons(api, {"ones": "pool default full: 2 of 2 slots in use",
                              "two": f"behind job {short(got, 'ones')}, ahead in the queue"})


async def test_a_two_slot_job_with_one_slot_free_says_what_it_lacks(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    api = await master(master_settings, aiohttp_client)
    await join(api, "a1", 2)
    await create(api, single("one"))
    await until_async(lambda: jobs(api), "one to start",
                      done=lambda g: g["one"]["allocatedSlots"] == 1)
    await create(api, single("two", "slots_per_trial: 2"))
    await until_reasons(api, {"one": None, "two": "needs 2 slots: 1 of 2 free in pool default"})


async def test_never_fits_no_agent_disabled_and_paused(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    api = await master(master_settings, aiohttp_client)
    await create(api, single("nowhere"))
    await until_reasons(api, {"nowhere": "no agent has joined resource pool 'default' yet"})
    await join(api, "a1", 2)
    await create(api, single("huge", "slots_per_trial: 4"))
    paused = (await create(api, single("paused", "priority: 1")))["experiment"]["id"]
    await api.call("POST", f"/api/v1/experiments/{paused}/pause")
    await until_reasons(api, {
        "huge": HUGE,
        "paused": "paused"})
    resp = await api.client.post("/api/v1/auth/login", json={"username": "admin"})
    admin = {"Authorization": f"Bearer {(await resp.json())['token']}"}
    await api.call("POST", "/api/v1/agents/a1/disable", {}, headers=admin)
    await create(api, single("idle"))
    await until_reasons(api, {"idle": "slots disabled: agent a1 disabled",
                              "huge": HUGE})
    await api.call("POST", "/api/v1/agents/a1/enable", {}, headers=admin)
    await until_reasons(api, {"idle": None})


ASHA = """
name: asha
entrypoint: python3 train.py
searcher: {name: adaptive_asha, metric: loss, max_trials: 2, max_time: 16,
           time_metric: batches, divisor: 4, max_rungs: 2, max_concurrent_trials: 2}
hyperparameters: {lr: {type: double, minval: 0.001, maxval: 0.1}}
"""


async def test_without_preemption_a_job_waits_for_running_trials_to_end(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    """The user's case: an ASHA search on a master without preemption, its one slot held by a
    trial the searcher closed that has not exited yet. The search's next trial waits for
    running trials to end, not for a preemption that will never come."""
    api = await master(master_settings, aiohttp_client)
    await join(api, "a1", 1)
    await create(api, ASHA)
    await until_reasons(api, {"asha": "pool default full: 1 of 1 slots in use"})
    app = api.client.server.app
    (alloc,) = await app[appkeys.DB].read(trial_store.live_allocations)
    token = app[appkeys.MINT].allocation(alloc.id)
    for steps in (4, 16):  # its rungs: the search's full length, and it is closed
        await api.call("POST", f"/api/v1/trials/{alloc.trial_id}/metrics", {
            "group": "validation", "metrics": {
                "trialId": alloc.trial_id, "trialRunId": 1, "stepsCompleted": steps,
                "metrics": {"avgMetrics": {"loss": 0.5, "batches": steps}}}},
            headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    got = await until_reasons(api, {
        "asha": "pool default full: waits for running trials to end (1 stopping now)"})
    assert got["asha"]["experimentState"] == "STATE_ACTIVE"
    assert alloc.id in app[appkeys.CLUSTER].dispatcher.preempting


async def test_a_trial_bigger_than_every_agent_can_never_start_here(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    """The user's case: slots_per_trial 4 on one 3-slot agent was accepted and stayed ACTIVE
    at 0 %, with a reason that never said it could not run here."""
    api = await master(master_settings, aiohttp_client)
    await join(api, "a1", 3)
    await create(api, single("four", "slots_per_trial: 4"))
    got = await until_reasons(api, {
        "four": "can never start here: needs 4 slots on one agent or on whole agents; the "
                "largest agent in pool default has 3, and 4 is not a multiple of 3"})
    assert got["four"]["summary"]["state"] == "STATE_QUEUED"


async def test_max_slots_of_the_experiment_in_a_fair_share_pool(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    api = await master(master_settings, aiohttp_client, PoolPolicy(scheduler=FAIR_SHARE))
    await join(api, "a1", 3)
    await create(api, GRID.format(name="capped", resources="max_slots: 1"))
    got = await until_reasons(api, {"capped": "max_slots 1 of the experiment reached"})
    assert got["capped"]["allocatedSlots"] == 1


# --- the reasons are the pass's own, over random queues --------------------------------------


def random_case(rng: random.Random) -> tuple[list[Request], list[AgentView], list[Running],
                                              dict[str, PoolPolicy]]:
    agents, running = [], []
    for a in range(rng.randint(0, 4)):
        n = rng.choice((1, 2, 4))
        used = frozenset(rng.sample(range(n), rng.randint(0, n)))
        agents.append(AgentView(f"a{a}", "default", tuple(range(n)), used,
                                enabled=rng.random() > 0.2))
        if used:
            running.append(Running(f"r{a}", f"job-r{a}", len(used), rng.randint(1, 60), 0.0,
                                   "default", float(a), placement=((f"a{a}", tuple(used)),),
                                   preempting=rng.random() < 0.1))
    requests = []
    key = 0
    for j in range(rng.randint(1, 8)):
        slots, priority = rng.choice((0, 1, 1, 2, 4, 8)), rng.choice((10, 42, 42, 50))
        cap = rng.choice((None, None, 1, 2))
        for _ in range(rng.randint(1, 3)):
            key += 1
            requests.append(Request(key, f"job{j}", slots, priority, float(j), "default",
                                    rng.choice((1.0, 2.0)), cap))
    policy = rng.choice((PoolPolicy(), PoolPolicy(preemption=True),
                         PoolPolicy(scheduler=FAIR_SHARE)))
    return requests, agents, running, {"default": policy}


def job_wait(decision: Any, job: list[Request]) -> Wait | str | None:
    """What the queue says of a job: as views/jobs.py reads a decision."""
    for r in job:
        if r.key in decision.unschedulable:
            return str(decision.unschedulable[r.key])
        if r.key in decision.waits:
            return decision.waits[r.key]  # type: ignore[no-any-return]
    tail = decision.tails.get("default")
    return tail.wait(job[0].job_id, job[0].priority, "default") if tail else None


@pytest.mark.parametrize("seed", range(4))
def test_every_job_that_waits_has_the_pass_s_reason(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        requests, agents, running, policies = random_case(rng)
        decision = schedule(requests, agents, running, policies)
        started = {a.key for a in decision.start}
        by_job: dict[str, list[Request]] = {}
        for r in requests:
            by_job.setdefault(r.job_id, []).append(r)
        for job_id, reqs in by_job.items():
            waiting = [r for r in reqs if r.key not in started]
            wait = job_wait(decision, waiting) if waiting else None
            if not waiting:
                assert not any(r.key in decision.waits for r in reqs)
                continue
            assert wait is not None, (job_id, requests, agents, running, policies, decision)
            text = wait if isinstance(wait, str) else wait.text
            assert text and "{" not in text
            if isinstance(wait, Wait) and wait.kind in ("priority", "queue"):
                ahead = next(j for j in by_job if j[:8] == wait.values[0])
                assert ahead != job_id
                assert any(r.key not in started for r in by_job[ahead]), "behind a started job"
                first = by_job[ahead][0]
                assert (first.priority, first.queue_position) <= (reqs[0].priority,
                                                                  reqs[0].queue_position)
                assert (wait.kind == "priority") == (first.priority < reqs[0].priority)
            if isinstance(wait, Wait) and wait.kind == "max_slots":
                assert policies["default"].scheduler == FAIR_SHARE and reqs[0].max_slots
