"""Authorisation as in Determined's basic model: owners and admins; agents with credentials of
their own; allocation tokens revoked at exit; sessions that expire and are stored hashed."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import exits
from tests.master.conftest import Api, agent_headers, allocate, store_text
from tests.master.test_api import create


async def login(api: Api, username: str, password: str = "") -> str:
    body = await api.call("POST", "/api/v1/auth/login",
                          {"username": username, "password": password}, headers={})
    return str(body["token"])


async def as_user(api: Api, username: str) -> Api:
    return Api(api.client, await login(api, username))


async def test_only_agents_speak_the_agent_protocol(api: Api) -> None:
    slots = {"id": "a1", "slots": [{"id": 0, "type": "cpu"}]}
    for who in (api, await as_user(api, "admin")):  # never a user's token, even an admin's
        body = await who.call("POST", "/api/v1/agents/register", slots, status=403)
        assert "agent credential" in body["message"]
    await api.call("POST", "/api/v1/agent-credentials", {}, status=403)  # admins issue them
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", slots, headers=agent)
    body = await api.call("GET", "/api/v1/experiments", headers=agent, status=403)
    assert "only be used for the agent protocol" in body["message"]
    # bound to a1 at its first registration: it cannot act as another agent...
    await api.call("POST", "/api/v1/agents/register", {**slots, "id": "a2"}, headers=agent,
                   status=403)
    # ...and another agent's credential cannot act as a1 (forge its exits, drain it)
    other = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {**slots, "id": "a2"}, headers=other)
    for path in ("/api/v1/agents/a1/heartbeat", "/api/v1/agents/a1/drain",
                 "/api/v1/agents/a1/allocations/x/exit", "/api/v1/agents/a1/leave"):
        body = await api.call("POST", path, {}, headers=other, status=403)
        assert "belongs to agent a2" in body["message"]
    admin = await as_user(api, "admin")
    creds = (await admin.call("GET", "/api/v1/agent-credentials"))["credentials"]
    assert [(c["agentId"], c["revoked"]) for c in creds] == [("a1", False), ("a2", False)]
    await admin.call("DELETE", f"/api/v1/agent-credentials/{creds[0]['id']}")
    await api.call("POST", "/api/v1/agents/a1/heartbeat", {}, headers=agent, status=401)


async def test_only_owners_and_admins_change_an_experiment(api: Api) -> None:
    admin = await as_user(api, "admin")
    theirs = (await create(admin))["experiment"]["id"]  # the admin's
    mine = (await create(api))["experiment"]["id"]  # determined's
    for method, path, body in [
            ("PATCH", f"/api/v1/experiments/{theirs}", {"name": "mine now"}),
            ("PATCH", f"/api/v1/experiments/{theirs}", {"resources": {"priority": 1}}),
            ("POST", f"/api/v1/experiments/{theirs}/kill", None),
            ("POST", f"/api/v1/experiments/{theirs}/pause", None),
            ("DELETE", f"/api/v1/experiments/{theirs}", None)]:
        refused = await api.call(method, path, body, status=403)
        assert f"only the owner of experiment {theirs} or an admin" in refused["message"]
    job = (await api.call("GET", f"/api/v1/experiments/{theirs}"))["experiment"]["jobId"]
    await api.call("POST", "/api/v1/job-queues",
                   {"updates": [{"jobId": job, "priority": 1}]}, status=403)
    assert (await api.call("GET", f"/api/v1/experiments/{theirs}"))["experiment"][
        "state"] == "STATE_ACTIVE"
    await api.call("PATCH", f"/api/v1/experiments/{mine}", {"name": "renamed"})  # the owner
    await admin.call("PATCH", f"/api/v1/experiments/{mine}", {"description": "by the admin"})
    await admin.call("POST", f"/api/v1/experiments/{mine}/kill")
    for _ in range(100):
        if (await api.call("GET", f"/api/v1/experiments/{mine}"))["experiment"]["state"] == \
                "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    await api.call("DELETE", f"/api/v1/experiments/{mine}")


async def test_only_owners_and_admins_kill_trials_and_change_checkpoints(api: Api) -> None:
    admin = await as_user(api, "admin")
    await create(admin)  # experiment 1, trial 1: the admin's
    alloc, token = await allocate(api, 1)
    task_id = (await admin.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    uuid = "00000000-0000-4000-8000-000000000001"
    await api.call("POST", "/api/v1/checkpoints", {
        "uuid": uuid, "taskId": task_id, "allocationId": alloc.id, "resources": {},
        "metadata": {"steps_completed": 5}},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    for method, path, body in [
            ("POST", "/api/v1/trials/1/kill", None),
            ("DELETE", "/api/v1/checkpoints", {"checkpointUuids": [uuid]}),
            ("PATCH", "/api/v1/checkpoints", {"checkpoints": [
                {"uuid": uuid, "resources": {"resources": {}}}]})]:
        refused = await api.call(method, path, body, status=403)
        assert "only the owner of" in refused["message"], (path, refused)
    ckpt = (await api.call("GET", f"/api/v1/checkpoints/{uuid}"))["checkpoint"]
    assert ckpt["state"] == "STATE_COMPLETED"
    assert (await api.call("GET", "/api/v1/trials/1"))["trial"]["state"] == "STATE_RUNNING"
    await admin.call("POST", "/api/v1/trials/1/kill")


async def test_only_admins_enable_and_disable_agents_and_slots(api: Api) -> None:
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",
                   {"id": "a1", "slots": [{"id": 0, "type": "cpu"}]}, headers=agent)
    admin = await as_user(api, "admin")
    for path in ("/api/v1/agents/a1/disable", "/api/v1/agents/a1/enable",
                 "/api/v1/agents/a1/slots/0/disable", "/api/v1/agents/a1/slots/0/enable"):
        refused = await api.call("POST", path, {}, status=403)
        assert "only an admin" in refused["message"], (path, refused)
        await api.call("POST", path, {}, headers=agent, status=403)
    listed = (await api.call("GET", "/api/v1/agents"))["agents"]
    assert listed[0]["enabled"] is True
    await admin.call("POST", "/api/v1/agents/a1/disable", {})
    assert (await api.call("GET", "/api/v1/agents"))["agents"][0]["enabled"] is False


async def test_users_are_created_deactivated_and_change_passwords(api: Api) -> None:
    admin = await as_user(api, "admin")
    new = {"user": {"username": "alice", "admin": False, "active": True},
           "password": "Secret-123", "isHashed": False}
    await api.call("POST", "/api/v1/users", new, status=403)
    alice = (await admin.call("POST", "/api/v1/users", new))["user"]
    await admin.call("POST", "/api/v1/users", new, status=409)
    assert (await api.call("GET", "/api/v1/users/alice/by-username"))["user"]["id"] == \
        alice["id"]
    token = await login(api, "alice", "Secret-123")
    await api.call("POST", "/api/v1/auth/login", {"username": "alice", "password": "nope"},
                   headers={}, status=401)
    as_alice = Api(api.client, token)
    await as_alice.call("PATCH", f"/api/v1/users/{alice['id']}", {"password": "Other-456"})
    await as_alice.call("PATCH", f"/api/v1/users/{alice['id']}", {"admin": True}, status=403)
    await as_alice.call("PATCH", "/api/v1/users/1", {"password": "x"}, status=403)
    await login(api, "alice", "Other-456")
    await admin.call("PATCH", f"/api/v1/users/{alice['id']}", {"active": False})
    await as_alice.call("GET", "/api/v1/me", status=401)  # her sessions ended with it
    await api.call("POST", "/api/v1/auth/login", {"username": "alice", "password": "Other-456"},
                   headers={}, status=403)
    await admin.call("PATCH", f"/api/v1/users/{alice['id']}", {"active": True})
    await login(api, "alice", "Other-456")


async def test_sessions_expire_and_secrets_are_stored_hashed(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    settings = replace(master_settings, session_lifetime=1.0)
    client = await aiohttp_client(create_app(settings))
    api = Api(client, "")
    api.token = await login(api, "determined")
    agent = await agent_headers(api)
    await api.call("GET", "/api/v1/me")
    dump = store_text(settings.db_target)
    assert api.token not in dump
    assert agent["Authorization"].split()[1] not in dump
    await asyncio.sleep(1.2)
    body = await api.call("GET", "/api/v1/me", status=401)
    assert "log in" in body["message"]


async def test_an_exited_allocations_token_and_a_stale_run_are_refused(api: Api) -> None:
    await create(api)
    old, old_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {old_token}"}
    cluster = api.client.server.app[appkeys.CLUSTER]
    await cluster.dispatcher.run(exits.end, old.id, None, "lost", "lost")
    new, new_token = await allocate(api, 1, "agent-x", [0])
    metrics: dict[str, Any] = {"group": "training", "metrics": {
        "trialId": 1, "trialRunId": old.run_id, "stepsCompleted": 5,
        "metrics": {"avgMetrics": {"loss": 1.0}}}}
    await api.call("POST", "/api/v1/trials/1/metrics", metrics, headers=task, status=401)
    task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    ckpt = {"uuid": "00000000-0000-4000-8000-000000000001", "taskId": task_id,
            "allocationId": old.id, "metadata": {"steps_completed": 5}, "resources": {}}
    await api.call("POST", "/api/v1/checkpoints", ckpt, headers=task, status=401)
    fresh = {"Grpc-Metadata-x-allocation-token": f"Bearer {new_token}"}
    stale = await api.call("POST", "/api/v1/trials/1/metrics", metrics, headers=fresh,
                           status=400)
    assert "invalid run id" in stale["message"]
    metrics["metrics"]["trialRunId"] = new.run_id
    await api.call("POST", "/api/v1/trials/1/metrics", metrics, headers=fresh)


async def test_a_trials_tokens_are_not_in_the_database_and_end_with_its_allocation(
        api: Api) -> None:
    """DET_SESSION_TOKEN and DET_USER_TOKEN: neither can be read out of master.db, and the
    owner's session a trial gets stops working when its allocation exits."""
    await create(api)
    alloc, token = await allocate(api, 1, "agent-x", [0])
    mint = api.client.server.app[appkeys.MINT]
    user_token = mint.task_user(alloc.id)
    me = await api.call("GET", "/api/v1/me", headers=api.headers(user_token))
    assert me["user"]["username"] == "determined"
    settings = api.client.server.app[appkeys.SETTINGS]
    state_dir = settings.state_dir
    dump = store_text(settings.db_target)
    assert token not in dump and user_token not in dump
    assert (state_dir / "secret.key").stat().st_mode & 0o077 == 0
    await api.client.server.app[appkeys.CLUSTER].dispatcher.run(exits.end, alloc.id, 0, "", "")
    await api.call("GET", "/api/v1/me", headers=api.headers(user_token), status=401)
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    await api.call("GET", "/api/v1/trials/1", headers=task, status=401)


@pytest.mark.parametrize("path", ["/api/v1/users", "/api/v1/agent-credentials"])
async def test_admin_lists_are_admin_only_where_they_hold_secrets(api: Api, path: str) -> None:
    status = 200 if path == "/api/v1/users" else 403
    body = await api.call("GET", path, status=status)  # `call` checks the status too
    if status == 200:
        assert {u["username"] for u in body["users"]} >= {"admin", "determined"}, body
    else:
        assert "admin" in body["message"].lower(), body
