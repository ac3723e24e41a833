"""Users of a lab (issue 29): per-user password salts, upgraded old hashes, and the linked
agent user (`det user link-with-agent-user`) that trials of a user's experiments run as."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest

from dettui.master.http import appkeys
from dettui.master.store import users
from tests.master.conftest import Api, agent_headers
from tests.master.test_api import create
from tests.master.test_auth import as_user, login

LINK = {"agentUid": 1001, "agentGid": 1002, "agentUser": "alice", "agentGroup": "lab"}


async def _new_user(admin: Api, name: str, password: str = "") -> dict[str, Any]:
    body = {"user": {"username": name, "admin": False, "active": True},
            "password": password, "isHashed": False}
    return dict((await admin.call("POST", "/api/v1/users", body))["user"])


async def _stored_hash(api: Api, name: str) -> str:
    user = await api.client.server.app[appkeys.DB].run(users.by_name, name)
    assert user is not None
    return user.password_hash


async def test_stored_hashes_two_users_with_one_password_have_different_hashes(
        api: Api) -> None:
    admin = await as_user(api, "admin")
    await _new_user(admin, "alice", "Same-pass-1")
    await _new_user(admin, "bob", "Same-pass-1")
    alice, bob = await _stored_hash(api, "alice"), await _stored_hash(api, "bob")
    assert alice.startswith("scrypt$16384$8$5$") and bob.startswith("scrypt$16384$8$5$")
    assert alice != bob and alice.split("$")[4] != bob.split("$")[4]  # salts differ too
    await login(api, "alice", "Same-pass-1")
    await login(api, "bob", "Same-pass-1")
    await api.call("POST", "/api/v1/auth/login", {"username": "bob", "password": "same-pass-1"},
                   headers={}, status=401)
    await api.call("POST", "/api/v1/auth/login", {"username": "carol", "password": "x"},
                   headers={}, status=401)


async def test_stored_hashes_of_an_older_version_still_log_in_and_are_upgraded(
        api: Api) -> None:
    """A state dir of an older master (PBKDF2, 20,000 rounds): its users still log in, and
    their first login stores the new form; a wrong password upgrades nothing."""
    admin = await as_user(api, "admin")
    alice = await _new_user(admin, "alice")
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", users.client_hash("Old-pass-9").encode(), salt,
                                 20_000)
    old = f"pbkdf2${salt.hex()}${digest.hex()}"
    await api.client.server.app[appkeys.CLUSTER].dispatcher.run(users.update, alice["id"],
                                                                password_hash=old)
    await api.call("POST", "/api/v1/auth/login", {"username": "alice", "password": "nope"},
                   headers={}, status=401)
    assert await _stored_hash(api, "alice") == old
    await login(api, "alice", "Old-pass-9")
    upgraded = await _stored_hash(api, "alice")
    assert upgraded.startswith("scrypt$") and not users.needs_rehash(upgraded)
    await login(api, "alice", "Old-pass-9")  # and the new form logs in


async def test_non_admin_user_administration_links_agent_users_for_admins_only(
        api: Api) -> None:
    admin = await as_user(api, "admin")
    alice = await _new_user(admin, "alice")
    assert alice["agentUserGroup"] is None
    as_alice = await as_user(api, "alice")
    path = f"/api/v1/users/{alice['id']}"
    await as_alice.call("PATCH", path, {"agentUserGroup": LINK}, status=403)  # not her own
    await api.call("PATCH", path, {"agentUserGroup": LINK}, status=403)
    got = (await admin.call("PATCH", path, {"agentUserGroup": LINK}))["user"]
    assert got["agentUserGroup"] == LINK
    assert (await as_alice.call("GET", "/api/v1/me"))["user"]["agentUserGroup"] == LINK
    listed = (await api.call("GET", "/api/v1/users"))["users"]
    assert [u["agentUserGroup"] for u in listed if u["username"] == "alice"] == [LINK]
    assert (await api.call("GET", path))["user"]["agentUserGroup"] == LINK
    await admin.call("PATCH", path, {"displayName": "Alice"})  # other changes keep the link
    assert (await api.call("GET", path))["user"]["agentUserGroup"] == LINK
    unlink = dict.fromkeys(LINK)
    assert (await admin.call("PATCH", path, {"agentUserGroup": unlink}))["user"][
        "agentUserGroup"] is None


@pytest.mark.parametrize("bad", [
    {"agentUid": -1}, {"agentUid": 2**31}, {"agentGid": 2**63}, {"agentUid": True},
    {"agentUid": "1001"}, {"agentUid": 1.5}, {"agentUser": "Alice"}, {"agentUser": "a b"},
    {"agentUser": "1alice"}, {"agentGroup": "x" * 33}, {"agentUser": "../root"},
    {"agentUser": "al\x1b[2Jice"}, {"agentGroup": ""}, {"agentUser": None},
    {"agentUser": "alice\n"},
])
async def test_agent_user_links_with_bad_values_are_refused(api: Api,
                                                            bad: dict[str, Any]) -> None:
    admin = await as_user(api, "admin")
    alice = await _new_user(admin, "alice")
    body = await admin.call("PATCH", f"/api/v1/users/{alice['id']}",
                            {"agentUserGroup": {**LINK, **bad}}, status=400)
    assert "agent" in body["message"].lower()
    assert (await api.call("GET", f"/api/v1/users/{alice['id']}"))["user"][
        "agentUserGroup"] is None


async def test_a_linked_owners_trials_start_as_its_agent_user(api: Api) -> None:
    """The start message an agent gets carries the experiment owner's linked agent user, and
    none for an unlinked owner (the agent's default trial user)."""
    admin = await as_user(api, "admin")
    alice = await _new_user(admin, "alice")
    await admin.call("PATCH", f"/api/v1/users/{alice['id']}", {"agentUserGroup": LINK})
    linked = (await create(await as_user(api, "alice")))["experiment"]["id"]
    unlinked = (await create(api))["experiment"]["id"]
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": i, "type": "cpu"} for i in range(2)],
        "runningAllocations": []}, headers=agent)
    starts: dict[int, Any] = {}
    for _ in range(10):
        got = await api.call("GET", "/api/v1/agents/a1/work?timeout_seconds=2", headers=agent)
        starts.update({w["experimentId"]: w for w in got["work"] if w["kind"] == "start"})
        if len(starts) == 2:
            break
    assert starts[linked]["agentUser"] == {"uid": 1001, "gid": 1002, "user": "alice",
                                           "group": "lab"}
    assert starts[unlinked]["agentUser"] is None


async def test_dettui_user_link_with_agent_user_and_list(
        api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    """`dettui user link-with-agent-user` (as `det`'s) sets the link; `user list` shows it."""
    import argparse

    from dettui.client import Client
    from dettui.commands import user

    admin = await as_user(api, "admin")
    await _new_user(admin, "alice")
    c = Client(str(api.client.server.make_url("")), admin.token)
    args = argparse.Namespace(verb="link-with-agent-user", username="alice", agent_uid=1001,
                              agent_gid=1002, agent_user="alice", agent_group="lab", json=False)
    try:
        await user.action(args)(c)
        await user.action(argparse.Namespace(verb="list", json=False))(c)
    finally:
        await c.close()
    out = capsys.readouterr().out
    assert "User alice runs trials as 1001:1002 (alice:lab)" in out
    assert "Agent user" in out and out.count("1001:1002 (alice:lab)") == 2, out
