"""GET /api/v1/agents names the trial each slot's container runs (issue 33, fix round, Y2): the
dashboard lists an agent's running trials from its allocations, before the agent has sent a
sample of them (its `trialResources` are empty then)."""

from __future__ import annotations

from tests.master.conftest import SIMPLE_CONFIG, Api, agent_headers
from tests.master.test_api import _until_states, create


async def test_each_slots_container_names_its_allocation_and_trial(api: Api) -> None:
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": i} for i in range(3)], "runningAllocations": []},
        headers=agent)
    two = await create(api, SIMPLE_CONFIG.replace("name: t", "name: two") +
                       "resources: {slots_per_trial: 2}\n")
    one = await create(api, SIMPLE_CONFIG.replace("name: t", "name: one"))
    await _until_states(api, {"two": "STATE_SCHEDULED", "one": "STATE_SCHEDULED"})
    (a1,) = (await api.call("GET", "/api/v1/agents"))["agents"]
    assert a1["trialResources"] == []  # no sample yet
    held = {}
    for exp in (two, one):
        exp_id = exp["experiment"]["id"]
        (trial,) = (await api.call("GET", f"/api/v1/experiments/{exp_id}/trials"))["trials"]
        held[trial["id"]] = exp_id
    containers = [s["container"] for s in a1["slots"].values()]
    assert all(c is not None for c in containers)
    slots_of = {t: 2 if e == two["experiment"]["id"] else 1 for t, e in held.items()}
    assert sorted(c["trialId"] for c in containers) == sorted(
        t for t, n in slots_of.items() for _ in range(n))
    for c in containers:
        assert c["experimentId"] == held[c["trialId"]]
        alloc = c["allocationId"]
        assert alloc.startswith(f"{c['experimentId']}.")
        assert c["id"] == f"{alloc.partition('.')[2]}.0"  # the container of that allocation
