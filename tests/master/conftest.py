"""The real master app in-process (pytest-aiohttp), on SQLite under tmp_path and on a
PostgreSQL database of the test's own: every test that takes `api` or `master_settings` runs on
both stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation
from dettui.master.tokens import Mint

TEST_MINT = Mint(b"dettui-tests-key-" * 2)  # for store functions called on a bare connection


class Api:
    def __init__(self, client: TestClient, token: str) -> None:
        self.client = client
        self.token = token

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    async def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                   status: int = 200, headers: dict[str, str] | None = None) -> Any:
        import json

        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        resp = await self.client.request(method, path, data=data,
                                         headers=self.headers() if headers is None else headers)
        text = await resp.text()
        assert resp.status == status, f"{method} {path}: {resp.status} {text}"
        return json.loads(text) if text and text.lstrip().startswith(("{", "[")) else text


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The store a test runs on: every test of tests/master that takes one of the fixtures
    below runs twice."""
    return str(request.param)


@pytest.fixture
def master_settings(backend: str, request: pytest.FixtureRequest,
                    tmp_path: Path) -> MasterSettings:
    """A master's settings, its store SQLite (in the state dir) or PostgreSQL. Take it before
    `aiohttp_client`: fixtures end in reverse order, so the master then closes before its
    database is given back."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    return MasterSettings(state_dir=tmp_path / "state", port=0, db_url=url)


@pytest.fixture
def store_target(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a bare store (no master) is: a SQLite file, or a PostgreSQL database."""
    return str(request.getfixturevalue("pg_url")) if backend == "postgres" else tmp_path / "m.db"


@pytest.fixture
async def api(master_settings: MasterSettings, aiohttp_client: Any) -> Api:
    client = await aiohttp_client(create_app(master_settings))
    resp = await client.post("/api/v1/auth/login",
                             data='{"username":"determined","password":""}')
    token = (await resp.json())["token"]
    return Api(client, token)


async def agent_headers(api: Api) -> dict[str, str]:
    """Headers of a new agent credential, issued by the admin (agents need their own)."""
    resp = await api.client.post("/api/v1/auth/login",
                                 data='{"username":"admin","password":""}')
    admin = (await resp.json())["token"]
    resp = await api.client.post("/api/v1/agent-credentials", data="{}",
                                 headers={"Authorization": f"Bearer {admin}"})
    assert resp.status == 200, await resp.text()
    return {"Authorization": f"Bearer {(await resp.json())['token']}"}


async def allocate(api: Api, trial_id: int, agent_id: str = "agent-x",
                   slots: list[int] | None = None) -> tuple[Allocation, str]:
    """A new allocation of the trial, as a scheduling pass makes it, and its task token."""
    app = api.client.server.app
    mint = app[appkeys.MINT]
    alloc = await app[appkeys.DB].run(trial_store.allocate, trial_id, agent_id,
                                   [0] if slots is None else slots, mint=mint)
    assert alloc is not None, f"trial {trial_id} is not waiting for slots"
    return alloc, mint.allocation(alloc.id)


def store_text(target: Path | str) -> str:
    """Every row of every table of the store at `target` (a SQLite file or a PostgreSQL URL),
    as text: what someone who copies the database can read."""
    from dettui.master.store.db import connect

    conn = connect(target)
    try:
        tables = conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'"
            if getattr(conn, "dialect", "") == "sqlite" else
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema()").fetchall()
        assert len(tables) > 10, tables
        return "\n".join(repr(tuple(row)) for (table,) in tables
                         for row in conn.execute(f"SELECT * FROM {table}"))
    finally:
        conn.close()


def ckpt_uuid(n: int) -> str:
    """A checkpoint uuid for tests, readable by its number."""
    return f"00000000-0000-4000-8000-{n:012d}"


SIMPLE_CONFIG = """
name: t
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
hyperparameters: {lr: 0.1}
"""
