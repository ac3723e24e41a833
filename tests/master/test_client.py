"""The typed client (`dettui.client.Client`) against the real master: each method the CLI, the
dashboard and the agent call reaches its route and reads its answer; error lines of an NDJSON
stream are decoded by `errors.message_of`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from dettui import errors
from dettui.client import Client, GcPolicy
from tests.master.conftest import Api, agent_headers, allocate, ckpt_uuid
from tests.master.test_api import create
from tests.master.test_paging import report


async def _client(api: Api, token: str | None = None, **kw: Any) -> Client:
    return Client(str(api.client.server.make_url("")), token, **kw)


async def test_users_and_agent_credentials(api: Api) -> None:
    c = await _client(api)
    other = await _client(api)
    try:
        await c.login("admin", "")
        made = await c.create_user("alice", "Secret-123")
        assert made["username"] == "alice" and not made["admin"]
        assert "alice" in [u["username"] for u in await c.users()]
        alice = await c.user_by_name("alice")
        assert alice["id"] == made["id"]
        await c.set_user_active(alice["id"], False)
        assert not (await c.user_by_name("alice"))["active"]
        await c.set_user_active(alice["id"], True)
        await c.set_password(alice["id"], "Other-456")
        with pytest.raises(errors.Unauthenticated):
            await other.login("alice", "Secret-123")
        await other.login("alice", "Other-456")
        with pytest.raises(errors.NotFound):
            await c.user_by_name("nobody")

        issued = await c.create_agent_credential("rack 3")
        assert len(issued["token"]) >= 20
        cred_id = issued["credential"]["id"]
        listed = {x["id"]: x for x in await c.agent_credentials()}
        assert listed[cred_id]["description"] == "rack 3" and not listed[cred_id]["revoked"]
        await c.revoke_agent_credential(cred_id)
        assert {x["id"]: x for x in await c.agent_credentials()}[cred_id]["revoked"]
    finally:
        await c.close()
        await other.close()


async def _checkpoints(api: Api, agent: dict[str, str]) -> tuple[str, str]:
    """Experiment 1 running on agent a1 with three checkpoints (loss 0.5, 0.2, 0.9): its
    allocation and the allocation's token."""
    await create(api)
    alloc, token = await allocate(api, 1, "a1", [0])
    await api.call("POST", "/api/v1/agents/register", {
        "id": "a1", "slots": [{"id": 0, "type": "cpu"}], "runningAllocations": [alloc.id]},
        headers=agent)
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    for n, loss in ((1, 0.5), (2, 0.2), (3, 0.9)):
        await report(api, 1, task, "validation", n * 10, {"loss": loss})
        await api.call("POST", "/api/v1/checkpoints", {
            "uuid": ckpt_uuid(n), "taskId": task_id, "allocationId": alloc.id,
            "reportTime": f"2026-11-22T04:56:5{n}+00:00", "resources": {"w": "1"},
            "metadata": {"steps_completed": n * 10}, "state": "STATE_COMPLETED"}, headers=task)
    return alloc.id, token


async def test_experiments_jobs_agents_and_checkpoints(api: Api) -> None:
    agent = await agent_headers(api)
    alloc_id, token = await _checkpoints(api, agent)
    c = await _client(api)
    task = await _client(api, task_token=token)
    try:
        await c.login("admin", "")
        uuids = [ck["uuid"] for ck in await c.checkpoints(1)]
        assert uuids == [ckpt_uuid(1), ckpt_uuid(2), ckpt_uuid(3)]
        best = await c.checkpoints(1, sort_by="SORT_BY_SEARCHER_METRIC", limit=2,
                                   states=("STATE_COMPLETED",))
        assert [ck["uuid"] for ck in best] == [ckpt_uuid(2), ckpt_uuid(1)]
        assert await c.checkpoints(1, states=("STATE_DELETED",)) == []
        newest, total = await c.newest_checkpoints(1, 1)
        assert [ck["uuid"] for ck in newest] == [ckpt_uuid(3)] and total == 3
        assert (await c.checkpoint(ckpt_uuid(2)))["uuid"] == ckpt_uuid(2)

        doomed = await c.preview_gc(1, GcPolicy(0, 1, 0))
        assert sorted(ck["UUID"] for ck in doomed) == [ckpt_uuid(1), ckpt_uuid(3)]
        await c.set_gc_policy(1, GcPolicy(0, 2, 1))
        storage = (await c.experiment(1))["config"]["checkpoint_storage"]
        assert (storage["save_trial_best"], storage["save_trial_latest"]) == (2, 1)

        await c.set_experiment_priority(1, 7)
        job = next(j for j in await c.jobs() if j["entityId"] == "1")
        assert job["priority"] == 7
        await c.update_job(job["jobId"], priority=9)
        assert next(j for j in await c.jobs() if j["entityId"] == "1")["priority"] == 9

        assert [t["allocationId"] for t in await c.tasks()] == [alloc_id]
        await c.set_agent_enabled("a1", False)
        assert not (await c.agents())[0]["enabled"]
        await c.set_agent_enabled("a1", True)
        assert (await c.agents())[0]["enabled"]
        with pytest.raises(errors.NotFound, match="not a Slurm job"):
            await task.slurm_start(alloc_id)
        with pytest.raises(errors.InvalidArgument, match="only an ended experiment"):
            await c.delete_experiment(1)  # still running
        await c.experiment_action(1, "kill")
        await api.call("POST", f"/api/v1/agents/a1/allocations/{alloc_id}/exit",
                       {"exitCode": 137, "reason": "killed"}, headers=agent)
        await c.delete_experiment(1)
        with pytest.raises(errors.NotFound):
            await c.experiment(1)
    finally:
        await c.close()
        await task.close()


@pytest.mark.parametrize("line", [
    b'{"error": {"code": 5, "message": "trial 1 not found"}}',
    b'{"error": "trial 1 not found"}',
    b'{"message": "trial 1 not found", "error": {"code": 5}}',
])
async def test_an_error_line_of_a_stream_is_raised_with_its_message(
        aiohttp_server: Any, tmp_path: Path, line: bytes) -> None:
    async def logs(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        await resp.write(b'{"result": {"message": "first"}}\n' + line + b"\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/api/v1/trials/1/logs", logs)
    server = await aiohttp_server(app)
    seen = []
    async with Client(str(server.make_url(""))) as c:
        with pytest.raises(errors.DettuiError) as raised:
            async for item in c.trial_logs(1):
                seen.append(item["message"])
    assert seen == ["first"]
    assert str(raised.value.message) == "trial 1 not found"


@pytest.mark.parametrize("plain", [False, True], ids=["aiohttp", "plain"])
async def test_a_stored_token_is_used_unchecked_and_renewed_once_when_refused(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: bool) -> None:
    """A command uses the stored token without a round trip to check it. If the master refuses
    it, the first refused call signs in again (once, however many calls were refused at the
    same time) and is sent again; a stream checks the token before it opens."""
    import asyncio

    from dettui import auth

    url = str(api.client.server.make_url("")).rstrip("/")
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(tmp_path / "config"))
    for name in ("DET_USER", "DET_PASS"):
        monkeypatch.delenv(name, raising=False)
    logins: list[str] = []
    real_login = Client.login

    async def counted(self: Client, username: str, password: str) -> str:
        logins.append(username)
        return await real_login(self, username, password)

    monkeypatch.setattr(Client, "login", counted)
    requests: list[str] = []
    real_request = Client._request

    async def seen(self: Client, method: str, path: str, *args: Any) -> Any:
        requests.append(path)
        return await real_request(self, method, path, *args)

    monkeypatch.setattr(Client, "_request", seen)
    c = await auth.authenticated(url, plain=plain)  # nothing stored: signs in
    good = c.token
    await c.close()
    assert logins == ["determined"] and auth.load_token(url) == ("determined", good)

    requests.clear()
    c = await auth.authenticated(url, plain=plain)  # the stored token, not checked first
    assert c.token == good and logins == ["determined"] and requests == []
    assert (await c.me())["username"] == "determined" and logins == ["determined"]
    await c.close()

    auth.store_token(url, "determined", "a-token-the-master-never-issued")
    c = await auth.authenticated(url, plain=plain)
    answers = await asyncio.gather(*(c.me() for _ in range(4)))  # refused at once: one sign-in
    assert [a["username"] for a in answers] == ["determined"] * 4
    assert logins == ["determined"] * 2
    assert auth.load_token(url) == ("determined", c.token) and c.token not in (good, None)
    await c.close()

    auth.store_token(url, "determined", "a-token-the-master-never-issued")
    c = await auth.authenticated(url, plain=plain)
    stream = c.stream(["jobs"])
    first = await stream.__anext__()
    await stream.aclose()
    assert first["topic"] == "jobs" and logins == ["determined"] * 3
    await c.close()
