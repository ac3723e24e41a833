"""A task by its id (a trial's task: its runs, its experiment's config, kill as `det trial
kill`), `det task cleanup-logs`, and the config-policy and pool-binding changes dettui answers
as not supported."""

from __future__ import annotations

import json

from tests.master.conftest import Api, allocate
from tests.master.test_api import create
from tests.master.test_trial_writes import login, user

NO_TASK = "0a1b2c3d-0000-4000-8000-000000000000"


async def test_a_trials_task_has_its_runs_and_its_experiments_config(api: Api) -> None:
    exp = (await create(api))["experiment"]
    trial = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"][0]
    alloc, _ = await allocate(api, trial["id"])
    task = (await api.call("GET", f"/api/v1/tasks/{trial['taskId']}"))["task"]
    assert task["taskId"] == trial["taskId"] and task["taskType"] == "TASK_TYPE_TRIAL"
    assert "endTime" not in task and task["startTime"]
    (run,) = task["allocations"]
    assert run["allocationId"] == alloc.id and run["state"] == "STATE_STARTING"
    assert run["slots"] == 1 and run["taskId"] == trial["taskId"]
    missing = await api.call("GET", f"/api/v1/tasks/{NO_TASK}", status=404)
    assert f"task '{NO_TASK}' not found: notebooks" in missing["error"]["error"]
    assert "its only tasks are trials'" in missing["message"]
    for method, path in (("GET", "/api/v1/tasks/x"), ("GET", "/api/v1/tasks/%00/config"),
                         ("POST", "/api/v1/tasks/x/kill"), ("POST", "/api/v1/tasks/x/pause")):
        hostile = await api.call(method, path, {} if method == "POST" else None, status=404)
        assert "not found" in hostile["message"], (path, hostile)

    config = json.loads((await api.call("GET", f"/api/v1/tasks/{trial['taskId']}/config"))[
        "config"])
    assert config["searcher"] == exp["config"]["searcher"]


async def test_killing_a_task_kills_its_trial_for_its_owner_or_an_admin(api: Api) -> None:
    admin = await login(api, "admin")
    alice = await user(api, admin, "alice")
    exp = (await create(api))["experiment"]
    trial = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"][0]
    path = f"/api/v1/tasks/{trial['taskId']}/kill"
    body = {"taskId": trial["taskId"], "killFromRoot": False}
    refused = await alice.call("POST", path, body, status=403)
    assert "only the owner" in refused["message"]
    await api.call("POST", path, body)
    assert (await api.call("GET", f"/api/v1/trials/{trial['id']}"))["trial"]["state"] == \
        "STATE_CANCELED"
    ended = await api.call("POST", path, body, status=400)
    assert "as it is in state 'CANCELED'" in ended["message"]
    await api.call("POST", f"/api/v1/tasks/{NO_TASK}/kill", body, status=404)

    paused = await api.call("POST", f"/api/v1/tasks/{trial['taskId']}/pause", status=400)
    assert "not supported by dettui" in paused["error"]["error"]
    assert f"det experiment pause {exp['id']}" in paused["message"]


async def test_cleanup_logs_policies_and_bindings(api: Api) -> None:
    admin = await login(api, "admin")
    await api.call("POST", "/api/v1/cleanup_logs", status=403)
    assert await admin.call("POST", "/api/v1/cleanup_logs") == {"removedCount": 0}

    policies = "/api/v1/config-policies/global/EXPERIMENT"
    await api.call("PUT", policies, {"invariantConfig": "{}"}, status=403)
    refused = await admin.call("PUT", policies, {"invariantConfig": "{}"}, status=501)
    assert "config policies are not supported" in refused["error"]["error"]
    assert await admin.call("DELETE", policies) == {}
    await admin.call("DELETE", "/api/v1/config-policies/global/BOGUS", status=400)

    pools = (await api.call("GET", "/api/v1/resource-pools"))["resourcePools"]
    bindings = f"/api/v1/resource-pools/{pools[0]['name']}/workspace-bindings"
    for method in ("POST", "PUT", "DELETE"):
        await api.call(method, bindings, {"workspaceNames": ["Uncategorized"]}, status=403)
        said = await admin.call(method, bindings, {"workspaceNames": ["Uncategorized"]},
                                status=501)
        assert "binding resource pools to workspaces is not supported" in said["message"]
    await admin.call("POST", "/api/v1/resource-pools/nope/workspace-bindings", {}, status=404)
