"""Callers remembered between requests (store/callers.py): a token read once is not read again,
and every change to who it belongs to is seen by the very next request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dettui.master.http import appkeys
from dettui.master.store import callers, control, credentials, exits, users
from dettui.master.store import db as dbmod
from dettui.master.store import trials as trial_store
from dettui.models import ExperimentState
from tests.master.conftest import Api, agent_headers, allocate
from tests.master.test_api import create
from tests.master.test_auth import as_user, login
from tests.master.test_store import TEST_MINT, _experiments


async def test_a_remembered_token_is_refused_as_soon_as_it_ends(api: Api) -> None:
    app = api.client.server.app
    known = app[appkeys.DB].callers
    if known is None:  # PostgreSQL: nothing is remembered, every request reads its caller
        return
    calls: list[str] = []
    run = app[appkeys.DB].run

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", ""))
        return await run(fn, *args, **kwargs)

    app[appkeys.DB].run = counted  # type: ignore[method-assign]
    # a user's session: read once, then remembered; logout ends it at once
    token = await login(api, "determined")
    me = Api(api.client, token)
    for _ in range(3):
        await me.call("GET", "/api/v1/me")
    assert calls.count("session") == 1  # the session, and whether a trial holds it
    await me.call("POST", "/api/v1/auth/logout")
    await me.call("GET", "/api/v1/me", status=401)
    # a task token, remembered, refused once its allocation exits
    await create(api)
    alloc, task_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {task_token}"}
    for _ in range(3):
        await api.call("GET", "/api/v1/trials/1", headers=task)
    assert calls.count("task") == 1
    await app[appkeys.CLUSTER].dispatcher.run(exits.end, alloc.id, 0, "", "")
    await api.call("GET", "/api/v1/trials/1", headers=task, status=401)
    # an agent's credential, remembered, refused once revoked
    agent = await agent_headers(api)
    slots = {"id": "a1", "slots": [{"id": 0, "type": "cpu"}]}
    await api.call("POST", "/api/v1/agents/register", slots, headers=agent)
    for _ in range(3):
        await api.call("POST", "/api/v1/agents/a1/heartbeat", {}, headers=agent)
    assert calls.count("agent") <= 2  # read at registration, and again after it bound a1
    admin = await as_user(api, "admin")
    cred = (await admin.call("GET", "/api/v1/agent-credentials"))["credentials"][0]
    await admin.call("DELETE", f"/api/v1/agent-credentials/{cred['id']}")
    await api.call("POST", "/api/v1/agents/a1/heartbeat", {}, headers=agent, status=401)


def test_every_change_to_a_caller_forgets_it(store_target: Path | str) -> None:
    """Each kind of change drops what was remembered of the caller it touches: a session
    ended, a user changed, a credential bound or revoked, an allocation's state changed."""
    conn = dbmod.connect(store_target)
    known = callers.watch(conn)
    if known is None:
        return
    users.ensure_default_users(conn, "")
    owner = users.by_name(conn, "determined")
    assert owner is not None
    session = users.new_session(conn, owner.id).value
    other = users.new_session(conn, owner.id).value
    assert callers.user(conn, known, session) == owner == callers.user(conn, known, other)
    assert known.user(session) == owner and known.user("no such token") is None
    users.drop_session(conn, session)  # a logout: that session only
    assert known.user(session) is None and known.user(other) == owner
    assert callers.user(conn, known, session) is None
    users.update(conn, owner.id, display_name="D")  # a user changed: every session read again
    assert known.user(other) is None
    assert callers.user(conn, known, other).display_name == "D"  # type: ignore[union-attr]

    cred, secret = credentials.issue(conn, None, "sim").value
    assert callers.agent(conn, known, secret) is not None and known.agent(secret) is not None
    credentials.bind(conn, cred.id, "a1")
    assert known.agent(secret) is None
    assert callers.agent(conn, known, secret).agent_id == "a1"  # type: ignore[union-attr]
    credentials.revoke(conn, cred.id)
    assert known.agent(secret) is None and callers.agent(conn, known, secret) is None

    (exp_id, trial_ids), = _experiments(conn, 2)
    alloc = trial_store.allocate(conn, trial_ids[0], "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None
    token = TEST_MINT.allocation(alloc.id)
    assert callers.task(conn, known, token) is not None and known.task(token) is not None
    trial_store.mark_running(conn, alloc.id)
    assert known.task(token) is None
    assert callers.task(conn, known, token)[0].state.value == "RUNNING"  # type: ignore[index]
    exits.end(conn, alloc.id, 0, "")
    assert known.task(token) is None and callers.task(conn, known, token) is None
    alloc = trial_store.allocate(conn, trial_ids[1], "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None
    token = TEST_MINT.allocation(alloc.id)
    assert callers.task(conn, known, token) is not None
    control.stop(conn, exp_id, ExperimentState.STOPPING_KILLED)  # a kill flags it
    assert known.task(token) is None
    users.update(conn, owner.id, display_name="E")  # its owner changed
    assert callers.task(conn, known, token) is not None
    users.update(conn, owner.id, display_name="F")
    assert known.task(token) is None
