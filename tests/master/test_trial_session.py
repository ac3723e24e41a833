"""A trial's DET_USER_TOKEN (its owner's session while it runs) does what the CLI and SDK inside
a trial need, and nothing that outlives the trial (issue 29, review): code planted in a trial
changed its owner's password with it (200, no old password asked) and so kept the account
after the allocation ended. Now every password change, user creation or change, agent-user
link and agent credential issued or revoked is a 403 saying a trial's session cannot do it,
for an ordinary owner's trial and an admin's; the same requests with a login's session work."""

from __future__ import annotations

from typing import Any

from dettui.master.http import appkeys
from dettui.master.store.users import client_hash
from tests.master.conftest import Api, allocate
from tests.master.test_api import create
from tests.master.test_trial_writes import login, user


async def trial_session(api: Api, owner: Api) -> tuple[Api, int]:
    """`owner`'s new running experiment and the DET_USER_TOKEN its trial is given."""
    exp = (await create(owner))["experiment"]["id"]
    trial = (await owner.call("GET", f"/api/v1/experiments/{exp}/trials"))["trials"][0]["id"]
    alloc, _ = await allocate(api, trial)
    return Api(api.client, api.client.server.app[appkeys.MINT].task_user(alloc.id)), trial


def refused(trial: Api, method: str, path: str, body: Any = None) -> Any:
    return trial.call(method, path, body, status=403)


async def test_a_trials_session_cannot_change_its_owners_password(api: Api) -> None:
    admin = await login(api, "admin")
    alice = await user(api, admin, "alice")
    me = (await alice.call("GET", "/api/v1/me"))["user"]
    session, _ = await trial_session(api, alice)
    for _ in range(2):  # read from the store, then remembered (store.callers)
        body = await refused(session, "POST", "/api/v1/users/alice/password", "Taken-123")
        assert "a trial's session (DET_USER_TOKEN" in body["message"]
        assert "cannot change a password" in body["message"]
        assert body["error"]["reason"] == "PermissionDenied"
    await refused(session, "PATCH", f"/api/v1/users/{me['id']}",
                  {"password": client_hash("Taken-123"), "isHashed": True})
    await refused(session, "PATCH", f"/api/v1/users/{me['id']}", {"displayName": "Mallory"})
    # The password is still alice's: her login works, the attacker's does not.
    await api.call("POST", "/api/v1/auth/login", {"username": "alice", "password": "Taken-123"},
                   headers={}, status=401)
    again = await user_login(api, "alice", "Secret-123")
    # Her own login's session still changes it.
    await again.call("POST", "/api/v1/users/alice/password", "Other-456")
    await user_login(api, "alice", "Other-456")


async def user_login(api: Api, name: str, password: str) -> Api:
    body = await api.call("POST", "/api/v1/auth/login",
                          {"username": name, "password": password}, headers={})
    return Api(api.client, body["token"])


async def test_an_admins_trial_session_cannot_touch_users_or_agent_credentials(
        api: Api) -> None:
    admin = await login(api, "admin")
    bob = await user(api, admin, "bob")
    bob_id = (await bob.call("GET", "/api/v1/me"))["user"]["id"]
    cred = (await admin.call("POST", "/api/v1/agent-credentials", {}))["credential"]
    session, _ = await trial_session(api, admin)
    link = {"agentUserGroup": {"agentUid": 0, "agentGid": 0, "agentUser": "root",
                               "agentGroup": "root"}}
    for method, path, body in [
            ("POST", "/api/v1/users", {"user": {"username": "eve", "admin": True,
                                                "active": True}, "password": "x"}),
            ("PATCH", f"/api/v1/users/{bob_id}", link),
            ("PATCH", f"/api/v1/users/{bob_id}", {"admin": True}),
            ("POST", "/api/v1/users/bob/password", "Taken-123"),
            ("POST", "/api/v1/users/admin/password", {"password": "Taken-123"}),
            ("POST", "/api/v1/agent-credentials", {"description": "mine"}),
            ("DELETE", f"/api/v1/agent-credentials/{cred['id']}", None)]:
        found = await refused(session, method, path, body)
        assert "a trial's session" in found["message"], (method, path, found)
    users = (await admin.call("GET", "/api/v1/users"))["users"]
    assert [u["username"] for u in users] == ["admin", "determined", "bob"]
    assert next(u for u in users if u["username"] == "bob")["agentUserGroup"] is None
    creds = (await admin.call("GET", "/api/v1/agent-credentials"))["credentials"]
    assert [(c["id"], c["revoked"]) for c in creds] == [(cred["id"], False)]
    # The admin's login does all of it.
    await admin.call("PATCH", f"/api/v1/users/{bob_id}", link)
    await admin.call("DELETE", f"/api/v1/agent-credentials/{cred['id']}")


async def test_a_trials_session_still_does_what_the_cli_and_sdk_inside_it_do(api: Api) -> None:
    admin = await login(api, "admin")
    alice = await user(api, admin, "alice")
    session, trial = await trial_session(api, alice)
    assert (await session.call("GET", "/api/v1/me"))["user"]["username"] == "alice"
    await session.call("GET", "/api/v1/users")
    await session.call("GET", "/api/v1/experiments")
    await session.call("GET", f"/api/v1/trials/{trial}")
    await session.call("GET", f"/api/v1/trials/{trial}/checkpoints")
    exp = (await session.call("GET", f"/api/v1/trials/{trial}"))["trial"]["experimentId"]
    await session.call("GET", f"/api/v1/experiments/{exp}/checkpoints")
    new = (await create(session))["experiment"]
    assert new["username"] == "alice"
    await session.call("POST", f"/api/v1/experiments/{new['id']}/pause")
    await session.call("POST", "/api/v1/auth/logout")  # ends only this session
    await session.call("GET", "/api/v1/me", status=401)
    await alice.call("GET", "/api/v1/me")
