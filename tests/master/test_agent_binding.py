"""An agent credential and an agent id are bound to each other (issue 29, attack 3): a fresh
credential registering under the id of a joined agent is refused, naming the credential that
holds the id; reports about an allocation are accepted only from the agent its part runs on;
the binding outlives master restarts, and revoking the credential frees the id."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dettui.errors import PermissionDenied
from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings, SlurmPool
from dettui.master.store import credentials
from dettui.master.store import db as dbmod
from tests.master.conftest import Api, agent_headers, allocate
from tests.master.test_api import create
from tests.master.test_auth import as_user

SLOTS = [{"id": 0, "type": "cpu"}]


async def join(api: Api, agent: dict[str, str], agent_id: str = "vm-local", *,
               status: int = 200, running: list[str] | None = None,
               hostname: str = "gpu-box") -> Any:
    return await api.call("POST", "/api/v1/agents/register", {
        "id": agent_id, "slots": SLOTS, "hostname": hostname,
        "runningAllocations": running or []}, headers=agent, status=status)


async def credential_ids(api: Api) -> dict[str | None, list[tuple[int, bool]]]:
    """Each agent id's credentials: (id, revoked)."""
    admin = await as_user(api, "admin")
    out: dict[str | None, list[tuple[int, bool]]] = {}
    for c in (await admin.call("GET", "/api/v1/agent-credentials"))["credentials"]:
        out.setdefault(c["agentId"], []).append((c["id"], c["revoked"]))
    return out


async def test_a_fresh_credential_cannot_register_under_a_joined_agents_id(api: Api) -> None:
    real = await agent_headers(api)
    await join(api, real)
    held_by = (await credential_ids(api))["vm-local"][0][0]
    rogue = await agent_headers(api)
    body = await join(api, rogue, hostname="rogue-box", status=403)
    assert f"agent id vm-local is bound to agent credential {held_by}" in body["message"]
    agents = (await api.call("GET", "/api/v1/agents"))["agents"]
    assert [(a["id"], a["hostname"], len(a["slots"])) for a in agents] == [
        ("vm-local", "gpu-box", 1)]  # the real agent's, not the rogue's
    assert (await credential_ids(api))[None] == [(held_by + 1, False)]  # the rogue's: unbound
    await join(api, rogue, "rogue")  # under an id of its own it may join


async def test_forged_reports_about_another_agents_allocation_are_refused(api: Api) -> None:
    """The attack: a forged exit report for the real agent's allocation ended its trial in
    ERROR. Exits, heartbeats, work polls and log lines from any other credential, bound or
    not, leave the real trial running."""
    await create(api)
    real = await agent_headers(api)
    alloc, _ = await allocate(api, 1, "vm-local")
    await join(api, real, running=[alloc.id])
    rogue, fresh = await agent_headers(api), await agent_headers(api)
    await join(api, rogue, "rogue")
    exit_ = {"exitCode": 1, "reason": "forged"}
    for who, agent_id in ((rogue, "vm-local"), (rogue, "rogue"), (fresh, "vm-local")):
        await api.call("POST", f"/api/v1/agents/{agent_id}/allocations/{alloc.id}/exit", exit_,
                       headers=who, status=403)
        await api.call("GET", f"/api/v1/agents/{agent_id}/work?timeout_seconds=0",
                       headers=who, status=403 if agent_id == "vm-local" else 200)
        await api.call("POST", f"/api/v1/agents/{agent_id}/logs", {"logs": [
            {"allocationId": alloc.id, "log": "forged line\n", "timestamp": 1.0}]},
            headers=who, status=403)
    await api.call("POST", "/api/v1/agents/vm-local/heartbeat",
                   {"runningAllocations": []}, headers=fresh, status=403)
    await api.call("POST", "/api/v1/agents/rogue/heartbeat",
                   {"runningAllocations": [alloc.id]}, headers=rogue)  # ignored for vm-local
    await api.call("POST", "/api/v1/agents/vm-local/heartbeat",
                   {"runningAllocations": [alloc.id]}, headers=real)
    work = (await api.call("GET", "/api/v1/agents/vm-local/work?timeout_seconds=0",
                           headers=real))["work"]
    assert [w["kind"] for w in work if w["allocationId"] == alloc.id] in ([], ["start"])
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert trial["state"] == "STATE_RUNNING", trial
    logs = await api.call("GET", "/api/v1/trials/1/logs")
    assert "forged line" not in str(logs)
    # the real agent's own report is taken
    await api.call("POST", f"/api/v1/agents/vm-local/allocations/{alloc.id}/exit",
                   {"exitCode": 0}, headers=real)


async def test_the_binding_outlives_a_master_restart(master_settings: MasterSettings,
                                                     aiohttp_client: Any) -> None:
    first = await _master(master_settings, aiohttp_client)
    await create(first)
    real = await agent_headers(first)
    alloc, _ = await allocate(first, 1, "vm-local")
    await join(first, real, running=[alloc.id])
    await first.client.close()

    second = await _master(master_settings, aiohttp_client)
    rogue = await agent_headers(second)
    body = await join(second, rogue, status=403)
    assert "is bound to agent credential 1" in body["message"]
    await join(second, real, running=[alloc.id])  # the real agent comes back and works on
    await second.call("POST", "/api/v1/agents/vm-local/heartbeat",
                      {"runningAllocations": [alloc.id]}, headers=real)
    work = (await second.call("GET", "/api/v1/agents/vm-local/work?timeout_seconds=0",
                              headers=real))["work"]
    assert not [w for w in work if w["kind"] == "kill"], work
    assert (await second.call("GET", "/api/v1/trials/1"))["trial"]["state"] == "STATE_RUNNING"


async def _master(settings: MasterSettings, aiohttp_client: Any) -> Api:
    client = await aiohttp_client(create_app(settings))
    resp = await client.post("/api/v1/auth/login", data='{"username":"determined","password":""}')
    return Api(client, (await resp.json())["token"])


async def test_revoking_a_credential_frees_its_agent_id(api: Api) -> None:
    old = await agent_headers(api)
    await join(api, old)
    admin = await as_user(api, "admin")
    await admin.call("DELETE", "/api/v1/agent-credentials/1")
    await api.call("POST", "/api/v1/agents/vm-local/heartbeat", {}, headers=old, status=401)
    new = await agent_headers(api)
    await join(api, new)  # an admin re-issued one: the agent joins under its id again
    await api.call("POST", "/api/v1/agents/vm-local/heartbeat", {}, headers=new)
    assert await credential_ids(api) == {"vm-local": [(1, True), (2, False)]}


async def test_the_masters_own_agent_takes_its_id_back_at_each_start(api: Api) -> None:
    """`dettui serve`'s local agent gets a fresh credential each start: the start revokes the
    master's earlier one for that id, never one an admin issued."""
    db = api.client.server.app[appkeys.DB]
    run = api.client.server.app[appkeys.CLUSTER].dispatcher.run
    first, _ = await run(credentials.issue_for_master, "host-local", "the embedded agent")
    second, secret = await run(credentials.issue_for_master, "host-local", "the embedded agent")
    assert (await db.run(credentials.get, first.id)).revoked
    await join(api, {"Authorization": f"Bearer {secret}"}, "host-local")
    assert (await db.run(credentials.holder, "host-local")) == second
    admins, _ = await run(credentials.issue, 1, "an admin's", "admins-host")
    with pytest.raises(PermissionDenied, match=f"bound to agent credential {admins.id}"):
        await run(credentials.issue_for_master, "admins-host", "the embedded agent")
    with pytest.raises(PermissionDenied, match=f"bound to agent credential {second.id}"):
        await run(credentials.issue, 1, "a second one", "host-local")


def test_migration_26_keeps_the_first_credential_of_an_id(tmp_path: Path) -> None:
    """A store where the attack already happened (two live credentials bound to one id): the
    first keeps the id, later ones are revoked, and the index holds from then on."""
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    conn.create_function("sha256_hex", 1, dbmod._sha256_hex)  # migration 17's
    for number, _name, sql in dbmod._migrations():
        if number <= 25:
            for statement in dbmod._split(sql):
                conn.execute(statement)
    conn.execute("PRAGMA user_version=25")
    for n, agent_id in enumerate(["vm-local", "vm-local", "other", None, None]):
        conn.execute("INSERT INTO agent_credentials (token_hash, agent_id, created_at) "
                     "VALUES (?, ?, 0)", (f"h{n}", agent_id))
    conn.close()
    conn = dbmod.connect(tmp_path / "old.db")
    rows = conn.execute("SELECT id, agent_id, revoked FROM agent_credentials ORDER BY id")
    assert [tuple(r) for r in rows] == [(1, "vm-local", 0), (2, "vm-local", 1),
                                        (3, "other", 0), (4, None, 0), (5, None, 0)]
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE agent_credentials SET agent_id='other' WHERE id=4")
    conn.close()


async def test_no_credential_joins_as_the_masters_slurm_pool(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    """A Slurm pool's agent is the master's own (no credential speaks for it): its id is
    refused to every agent credential, so none can take over its link and its work."""
    settings = replace(master_settings, slurm={"hpc": SlurmPool("hpc", "gpu")})
    api = await _master(settings, aiohttp_client)
    body = await join(api, await agent_headers(api), "slurm-hpc", status=403)
    assert "belongs to the master's Slurm pool" in body["message"]
