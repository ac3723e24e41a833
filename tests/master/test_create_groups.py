"""Experiments asked for at the same time are committed together (a group commit: one
transaction, one read of ids), each answered only once stored, with its own id, trials and
searcher; a group that fails to commit fails every request in it and stores none of them."""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from dettui.master.groupcommit import GroupCommit
from dettui.master.http import appkeys
from dettui.master.store import experiments as exp_store
from tests.master.conftest import SIMPLE_CONFIG, Api
from tests.master.test_api import create
from tests.poll import until_async

FILES = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode(),
          "mtime": "1700000000", "mode": 33188, "uid": 0, "gid": 0}]
GRID = """
name: g{n}
entrypoint: python3 train.py
searcher: {{name: grid, metric: loss, max_length: {{batches: 10}}}}
hyperparameters:
  lr: {{type: categorical, vals: [{n}, {m}]}}
"""


class Held:
    """The creations' dispatcher, held shut until `release` (on the event loop: the store
    thread stays free for the requests' other reads)."""

    def __init__(self, creations: GroupCommit[Any, Any]) -> None:
        self.dispatcher = creations.dispatcher
        self.release = asyncio.Event()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        await self.release.wait()
        return await self.dispatcher.run(fn, *args)


async def _hold(api: Api, monkeypatch: pytest.MonkeyPatch,
                ) -> tuple[GroupCommit[Any, Any], Held, asyncio.Future[Any]]:
    """Hold the creations' store; one creation sent, waiting in a group of its own."""
    creations = api.client.server.app[appkeys.CREATIONS]
    held = Held(creations)
    monkeypatch.setattr(creations, "dispatcher", held)
    first = asyncio.ensure_future(create(api, GRID.format(n=1, m=2)))
    await until_async(lambda: creations._writer is not None and not creations._writer.done(),
                      "the creations' writer to start", timeout=10)
    return creations, held, first


async def test_creations_at_once_share_commits_and_each_is_whole(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    creations, held, first = await _hold(api, monkeypatch)
    before = creations.groups
    rest = asyncio.gather(*(create(api, GRID.format(n=n, m=n + 100)) for n in range(2, 13)))
    await until_async(lambda: len(creations._pending) == 11, "11 creations pending", timeout=10)
    held.release.set()
    made = [await first, *await rest]
    assert creations.groups - before == 2, "the eleven waiting were not committed together"
    ids = [m["experiment"]["id"] for m in made]
    assert ids[0] == 1 and sorted(ids) == list(range(1, 13))  # once each (in arrival order)
    for n, answer in enumerate(made, 1):
        exp = answer["experiment"]
        assert exp["name"] == f"g{n}" and answer["config"]["name"] == f"g{n}"
        assert exp["numTrials"] == 2
        trials = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"]
        assert sorted(t["hparams"]["lr"] for t in trials) == [n, n + 100 if n > 1 else 2]
        assert all(t["experimentId"] == exp["id"] for t in trials)
    listed = await api.call("GET", "/api/v1/experiments?limit=100")
    assert sorted(e["id"] for e in listed["experiments"]) == sorted(ids)
    trial_ids = [t["id"] for e in ids for t in (await api.call(
        "GET", f"/api/v1/experiments/{e}/trials"))["trials"]]
    assert sorted(trial_ids) == list(range(1, 25))


async def test_a_group_that_fails_to_commit_fails_each_request_and_stores_none(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    real = exp_store._insert

    def insert(conn: sqlite3.Connection, exp_id: int, new: exp_store.NewExperiment,
               *args: object) -> None:
        real(conn, exp_id, new, *args)
        if new.name == "bad":  # after the group's first insert
            raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(exp_store, "_insert", insert)
    creations, held, first = await _hold(api, monkeypatch)
    group = asyncio.gather(*(api.call("POST", "/api/v1/experiments", {
        "config": SIMPLE_CONFIG.replace("name: t", f"name: {name}"), "activate": True,
        "modelDefinition": FILES}, status=500) for name in ("a", "bad", "c")))
    # the next group, all three
    await until_async(lambda: len(creations._pending) == 3, "3 creations pending", timeout=10)
    held.release.set()
    assert (await first)["experiment"]["id"] == 1
    for answer in await group:
        assert "disk I/O error" in answer["message"]
    listed = (await api.call("GET", "/api/v1/experiments"))["experiments"]
    assert [e["name"] for e in listed] == ["g1"], "a failed group left experiments behind"
    monkeypatch.setattr(exp_store, "_insert", real)
    again = await create(api)  # the store goes on, and ids are given once
    assert again["experiment"]["id"] == 2
    trials = (await api.call("GET", "/api/v1/experiments/2/trials"))["trials"]
    assert [t["id"] for t in trials] == [3]


async def test_a_group_holds_at_most_its_bytes_but_always_one() -> None:
    """Contexts of 95 MiB are not written in one transaction together (it would hold the store
    thread for seconds): a group stops before the item that takes it over its bytes, and an
    item over them alone still goes, in a group of its own."""
    groups: list[list[int]] = []

    class Store:
        async def run(self, fn: Callable[..., Any], items: list[int]) -> list[int]:
            await asyncio.sleep(0)
            return list(fn(None, items))

    def write(conn: object, items: list[int]) -> list[int]:
        groups.append(items)
        return items

    commit: GroupCommit[int, int] = GroupCommit(Store(), write, 3,  # type: ignore[arg-type]
                                                size=lambda n: n, most_bytes=10)
    got = await commit.submit(4, 4, 4, 30, 1, 1, 1, 1)
    assert got == [4, 4, 4, 30, 1, 1, 1, 1]
    assert groups == [[4, 4], [4], [30], [1, 1, 1], [1]]
