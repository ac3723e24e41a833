"""Paged lists (Determined's offset/limit/orderBy and pagination object, read with SQL
LIMIT/OFFSET through an index), and downsampled metric series for charts."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dettui import series
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import db as store_db
from dettui.master.store import experiments as exp_store
from dettui.master.store import logs as log_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import pg, tx
from dettui.master.store import trials as trial_store
from dettui.master.store.page import Page
from tests.master.conftest import SIMPLE_CONFIG, Api, allocate, ckpt_uuid
from tests.master.test_api import create

GRID = """
name: g
entrypoint: python3 train.py
searcher: {name: grid, metric: loss, max_length: {batches: 10}}
hyperparameters: {lr: {type: categorical, vals: [1, 2, 3, 4, 5]}}
"""


def ids(body: dict[str, Any], key: str, field: str = "id") -> list[Any]:
    return [x[field] for x in body[key]]


async def test_every_list_pages_as_determined(api: Api) -> None:
    for _ in range(4):
        await create(api)
    await create(api, GRID)  # experiment 5: five trials, 5..9
    page = await api.call("GET", "/api/v1/experiments?limit=2&offset=1")
    assert ids(page, "experiments") == [2, 3]
    assert page["pagination"] == {"offset": 1, "limit": 2, "startIndex": 1, "endIndex": 3,
                                  "total": 5}
    page = await api.call("GET", "/api/v1/experiments?limit=2&orderBy=ORDER_BY_DESC")
    assert ids(page, "experiments") == [5, 4]
    page = await api.call("GET", "/api/v1/experiments?offset=-2")  # from the end
    assert ids(page, "experiments") == [4, 5] and page["pagination"]["startIndex"] == 3
    page = await api.call("GET", "/api/v1/experiments?limit=9223372036854775807&offset=5")
    assert page["experiments"] == [] and page["pagination"]["endIndex"] == 5
    page = await api.call("GET", "/api/v1/experiments?sortBy=SORT_BY_NUM_TRIALS"
                                 "&orderBy=ORDER_BY_DESC&limit=1")
    assert ids(page, "experiments") == [5]
    page = await api.call("GET", "/api/v1/experiments/5/trials?limit=2&offset=2")
    assert ids(page, "trials") == [7, 8] and page["pagination"]["total"] == 5
    page = await api.call("GET", "/api/v1/experiments/5/trials?orderBy=ORDER_BY_DESC&limit=1")
    assert ids(page, "trials") == [9]
    jobs = await api.call("GET", "/api/v1/job-queues-v2?limit=2&offset=3")
    assert [j["full"]["entityId"] for j in jobs["jobs"]] == ["4", "5"]
    assert [j["full"]["summary"]["jobsAhead"] for j in jobs["jobs"]] == [3, 4]
    assert jobs["pagination"]["total"] == 5 and jobs["pagination"]["endIndex"] == 5
    jobs = await api.call("GET", "/api/v1/job-queues-v2?limit=1&orderBy=ORDER_BY_DESC")
    assert [j["full"]["entityId"] for j in jobs["jobs"]] == ["5"]
    assert jobs["jobs"][0]["full"]["requestedSlots"] == 5  # its five queued trials
    assert jobs["jobs"][0]["full"]["summary"]["jobsAhead"] == 4  # its place in the queue
    jobs = await api.call("GET", "/api/v1/job-queues-v2?limit=2&offset=1&orderBy=ORDER_BY_DESC")
    assert [(j["full"]["entityId"], j["full"]["summary"]["jobsAhead"]) for j in jobs["jobs"]] \
        == [("4", 3), ("3", 2)]


@pytest.mark.parametrize("query", [
    "limit=x", "offset=1.5", "offset=6", "offset=-6", "limit=99999999999999999999",
    "orderBy=ORDER_BY_SIDEWAYS", "sortBy=SORT_BY_NOTHING", "offset=%E2%91%A0"])
async def test_bad_page_parameters_are_400(api: Api, query: str) -> None:
    for _ in range(5):
        await create(api)
    for path in ("/api/v1/experiments", "/api/v1/experiments/1/trials",
                 "/api/v1/job-queues-v2", "/api/v1/experiments/1/checkpoints",
                 "/api/v1/trials/1/metrics"):
        if "sortBy" in query and ("job" in path or "checkpoints" in path or "metrics" in path):
            continue  # no sortBy there
        bad = await api.call("GET", f"{path}?{query}", status=400)
        assert bad["message"], bad


async def report(api: Api, trial_id: int, task: dict[str, str], group: str, steps: int,
                 metrics: dict[str, Any]) -> None:
    await api.call("POST", f"/api/v1/trials/{trial_id}/metrics", {"group": group, "metrics": {
        "trialId": trial_id, "trialRunId": 1, "stepsCompleted": steps,
        "metrics": {"avgMetrics": metrics}}}, headers=task)


async def test_checkpoints_and_metrics_page_and_downsample(api: Api) -> None:

    await create(api, SIMPLE_CONFIG)
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    losses = {s: 1 / s for s in range(1, 101)}
    losses[50] = 9.0  # a spike that downsampling must keep
    for steps, loss in losses.items():
        await report(api, 1, task, "training", steps, {"loss": loss, "acc": steps})
    for n, loss in ((1, 0.5), (2, 0.2), (3, 0.9)):
        await report(api, 1, task, "validation", n * 10, {"loss": loss})
        await api.call("POST", "/api/v1/checkpoints", {
            "uuid": ckpt_uuid(n), "taskId": task_id, "allocationId": alloc.id,
            "reportTime": f"2026-11-22T04:56:5{n}+00:00", "resources": {"w": "1"},
            "metadata": {"steps_completed": n * 10}, "state": "STATE_COMPLETED"}, headers=task)
    page = await api.call("GET", "/api/v1/experiments/1/checkpoints?limit=2&offset=1")
    assert ids(page, "checkpoints", "uuid") == [ckpt_uuid(2), ckpt_uuid(3)]
    assert page["pagination"]["total"] == 3
    assert page["checkpoints"][0]["training"]["validationMetrics"]["avgMetrics"] == {"loss": 0.2}
    best = await api.call("GET", "/api/v1/trials/1/checkpoints?sortByAttr="
                                 "SORT_BY_SEARCHER_METRIC&limit=2")
    assert ids(best, "checkpoints", "uuid") == [ckpt_uuid(2), ckpt_uuid(1)]
    page = await api.call("GET", "/api/v1/trials/1/metrics?group=training&limit=10&offset=20")
    assert [m["stepsCompleted"] for m in page["metrics"]] == list(range(21, 31))
    assert page["pagination"]["total"] == 100
    page = await api.call("GET", "/api/v1/trials/1/metrics?group=training&afterSteps=97")
    assert [m["stepsCompleted"] for m in page["metrics"]] == [98, 99, 100]
    chart = await api.call("GET", "/api/v1/trials/1/metrics?group=training&maxPoints=12")
    assert chart["reports"] == 100 and chart["lastSteps"] == 100
    by_name = {s["name"]: s for s in chart["series"]}
    assert set(by_name) == {"loss", "acc"}
    loss = by_name["loss"]
    assert len(loss["steps"]) <= 12 and loss["steps"][0] == 1 and loss["steps"][-1] == 100
    assert 50 in loss["steps"] and loss["steps"] == sorted(loss["steps"])
    one = await api.call("GET", "/api/v1/trials/1/metrics?group=training&maxPoints=2"
                                "&metric=acc")
    assert one["series"] == [{"name": "acc", "steps": [1, 100], "values": [1, 100]}]
    for bad in ("maxPoints=1&group=training", "maxPoints=10", "maxPoints=x&group=training"):
        await api.call("GET", f"/api/v1/trials/1/metrics?{bad}", status=400)


async def test_a_long_metrics_read_streams_in_chunks_and_equals_the_paged_one(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past STREAM_CHUNK reports, GET /trials/{id}/metrics is written piece by piece (each
    piece an index walk after the last one's key), never held whole by the master; what the
    client gets is the same JSON, in either order, from any offset, past a cursor."""
    from dettui.master.routes import trials as trial_routes

    await create(api, SIMPLE_CONFIG)
    _, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    for steps in range(1, 41):
        await report(api, 1, task, "training", steps, {"loss": 1 / steps})
        if steps % 4 == 0:
            await report(api, 1, task, "validation", steps, {"loss": 2 / steps})
    await report(api, 1, task, "training", 40, {"extra": 1})  # merged into step 40's report

    def steps(body: dict[str, Any]) -> list[tuple[str, int]]:
        return [(m["group"], m["stepsCompleted"]) for m in body["metrics"]]

    queries = ["", "group=training", "orderBy=ORDER_BY_DESC", "group=validation&orderBy="
               "ORDER_BY_DESC", "offset=13", "offset=-9&limit=30", "afterSteps=25",
               "group=training&limit=23&offset=2&orderBy=ORDER_BY_DESC"]
    whole = {q: await api.call("GET", f"/api/v1/trials/1/metrics?{q}") for q in queries}
    monkeypatch.setattr(trial_routes, "STREAM_CHUNK", 4)
    for q in queries:
        resp = await api.client.get(f"/api/v1/trials/1/metrics?{q}", headers=api.headers())
        assert resp.status == 200
        streamed = await resp.json()
        assert streamed == whole[q], q
        if len(whole[q]["metrics"]) > 4:
            assert resp.headers.get("Transfer-Encoding") == "chunked", q
    assert len(whole[""]["metrics"]) == 50 and whole[""]["pagination"]["total"] == 50
    assert steps(whole["offset=-9&limit=30"]) == steps(whole[""])[-9:]
    assert steps(whole["group=validation&orderBy=ORDER_BY_DESC"]) == [
        ("validation", s) for s in range(40, 0, -4)]
    assert [s for _, s in steps(whole["afterSteps=25"])] == sorted(
        [s for s in range(26, 41)] + [28, 32, 36, 40])
    assert whole["group=training&limit=23&offset=2&orderBy=ORDER_BY_DESC"]["pagination"] == {
        "offset": 2, "limit": 23, "startIndex": 2, "endIndex": 25, "total": 40}


def test_downsample_keeps_ends_and_extremes() -> None:
    rng = random.Random(7)
    for size in (0, 1, 2, 3, 10, 257, 5000):
        points = [(float(i), rng.uniform(-1, 1)) for i in range(size)]
        for n in (2, 3, 4, 9, 80):
            out = series.downsample(points, n)
            assert len(out) <= n
            assert out == sorted(out) and set(out) <= set(points)
            if points:
                assert out[0] == points[0] and out[-1] == points[-1]
            if size > n >= 4:
                assert max(p[1] for p in points) in [p[1] for p in out]
                assert min(p[1] for p in points) in [p[1] for p in out]


SEEN: list[tuple[str, tuple[Any, ...]]] = []  # each statement the store runs, with its args


class Recording(tx.Connection):
    """The store's SQLite connection, remembering each statement it runs."""

    def execute(self, sql: str, args: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        SEEN.append((sql, tuple(args)))
        return super().execute(sql, args)


class PgRecording(pg.Connection):
    """The store's PostgreSQL connection, remembering each statement it runs."""

    def execute(self, sql: str, args: Any = ()) -> pg.Cursor:
        SEEN.append((sql, tuple(args)))
        return super().execute(sql, args)


def _sqlite_problems(conn: Any, sql: str, args: tuple[Any, ...]) -> list[str]:
    """Scans of the big tables and sorts in a temporary b-tree, by EXPLAIN QUERY PLAN. A page
    or count of experiments may walk a narrow index, never their rows (each holds its config:
    a walk to offset 9,900 read 5,000 pages)."""
    plan = [r[3] for r in sqlite3.Connection.execute(conn, f"EXPLAIN QUERY PLAN {sql}", args)]
    tables = ("trials", "metrics", "checkpoints", "logs", "t")
    narrow = "LIMIT" in sql or "COUNT(*)" in sql
    return [p for p in plan if "TEMP B-TREE" in p or p.startswith(tuple(f"SCAN {t}"
                                                                          for t in tables))
            or (p.startswith(("SCAN e", "SCAN experiments"))
                and not (narrow and " USING COVERING INDEX " in p))]


def _pg_problems(conn: Any, sql: str, args: tuple[Any, ...]) -> list[str]:
    """The same on PostgreSQL: with sequential scans and sorts priced out (enable_seqscan and
    enable_sort off), the plan still has one only where no index serves the read."""
    text = pg.Connection.execute(conn, f"EXPLAIN (FORMAT JSON) {sql}", args).fetchone()[0]
    tables = {"trials", "metrics", "checkpoints", "logs"}
    if "LIMIT" not in sql and "COUNT(*)" not in sql:
        tables.add("experiments")
    out, todo = [], [json.loads(text)[0]["Plan"]]
    while todo:
        node = todo.pop()
        todo += node.get("Plans", [])
        kind = node["Node Type"]
        if "Sort" in kind or (kind == "Seq Scan" and node.get("Relation Name") in tables):
            out.append(f"{kind} {node.get('Relation Name', '')}".strip())
    return out


def _recording_store(target: Path | str) -> Any:
    """A migrated store whose connection records its statements, with a few rows in each
    paged table."""
    if isinstance(target, str):
        conn: Any = PgRecording(target)
        raw = pg.Connection.execute
        raw(conn, "SET enable_seqscan = off")
        raw(conn, "SET enable_sort = off")
    else:
        conn = sqlite3.connect(target, isolation_level=None, factory=Recording)
        conn.row_factory = sqlite3.Row
        store_db.migrate(conn)
        raw = sqlite3.Connection.execute
    raw(conn, "INSERT INTO users (id, username) VALUES (1, 'determined') ON CONFLICT DO NOTHING")
    for i in range(1, 4):
        raw(conn, "INSERT INTO experiments (id, name, state, owner_id, config, original_config, "
            "searcher_type, job_id, resource_pool, priority, queue_position, start_time) "
            "VALUES (?, 'e', 'STATE_ACTIVE', 1, '{}', '', 'single', ?, 'default', 42, ?, 0)",
            (i, f"job{i}", i))
        raw(conn, "INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, "
            "state, start_time) VALUES (?, 1, 'r', ?, '{}', 0, 'STATE_QUEUED', 0)", (i, f"t{i}"))
        raw(conn, "INSERT INTO metrics (trial_id, run_id, grp, steps_completed, report_time, "
            "metrics) VALUES (1, 1, 'validation', ?, 0, '{\"loss\": 1}')", (i,))
        raw(conn, "INSERT INTO checkpoints (uuid, trial_id, experiment_id, task_id, "
            "report_time, state, resources, metadata, steps_completed) "
            "VALUES (?, 1, 1, 't1', ?, 'STATE_COMPLETED', '{}', '{}', ?)", (f"u{i}", i, i))
        raw(conn, "INSERT INTO logs (trial_id, task_id, timestamp, log) VALUES (1, 't1', 0, 'x')")
    return conn


def test_a_page_is_read_through_an_index(store_target: Path | str) -> None:
    """The plan of what each paged read runs: trials, metrics, checkpoints and logs are
    searched by index (never scanned), and no page is sorted (the rows come in index order, so
    LIMIT stops the walk). SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN."""
    conn = _recording_store(store_target)
    SEEN.clear()
    for want in (Page(0, 2), Page(1, 2, desc=True)):
        exp_store.page(conn, want)
        exp_store.page(conn, want, archived=False, users=["determined"])
        exp_store.page(conn, want, states=["STATE_ACTIVE"])
        trial_store.page(conn, 1, want)
        ckpt_store.page(conn, want, experiment_id=1)
        ckpt_store.page(conn, want, trial_id=1)
        metric_store.count(conn, 1, None)
        metric_store.count(conn, 1, "validation", after_steps=1)
        for group in (None, "validation"):  # a long read's first chunk, then one past its key
            metric_store.chunk(conn, 1, group, desc=want.desc, offset=want.offset,
                               limit=want.limit)
            metric_store.chunk(conn, 1, group, desc=want.desc, key=(1, 1), limit=want.limit)
        exp_store.queue_views(conn, want)
        exp_store.queue_views(conn, want, "default")
        exp_store.queue_views(conn, want, None, with_requests=True)
    exp_store.live_keys(conn)
    trial_store.active(conn)
    trial_store.running_of(conn, [1, 2])
    trial_store.queued_counts(conn, [1, 2])
    metric_store.raw_series(conn, 1, "validation")
    metric_store.at_steps_many(conn, [(1, 1), (1, 2)], ("training", "validation"))
    log_store.fetch(conn, 1, log_store.LogFilter(), limit=2)
    selects = [(s, a) for s, a in SEEN if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) >= 30
    problems = _pg_problems if isinstance(store_target, str) else _sqlite_problems
    for sql, args in selects:
        found = problems(conn, sql, args)
        assert not found, (sql, found)
    conn.close()


async def test_stream_windows_and_client_pages(api: Api) -> None:
    """`experiments?limit=N` streams the newest N with the list's total, `jobs?limit=N` the
    first N in queue order; the client's `paged` reads every page of a list."""
    from dettui.client import Client
    from tests.master.test_stream import connect

    for _ in range(3):
        await create(api)
    inbox = await connect(api, "experiments?limit=2", "jobs?limit=2", "jobs?limit=x")
    snap = await inbox.next("experiments?limit=2")
    assert snap["order"] == ["3", "2"] and snap["total"] == 3
    jobs = await inbox.next("jobs?limit=2")
    assert [j["entityId"] for j in jobs["upsert"]] == ["1", "2"] and jobs["total"] == 3
    await create(api)
    diff = await inbox.next("experiments?limit=2")
    assert diff["order"] == ["4", "3"] and diff["remove"] == ["2"] and diff["total"] == 4
    assert (await inbox.next("jobs?limit=2"))["total"] == 4
    async with Client(str(api.client.make_url("")).rstrip("/"), api.token) as client:
        every = await client.paged("/api/v1/experiments", "experiments", page_size=3)
        assert [e["id"] for e in every] == [1, 2, 3, 4]
        jobs_read = await client.paged("/api/v1/job-queues-v2", "jobs", page_size=1)
        assert [j["full"]["entityId"] for j in jobs_read] == ["1", "2", "3", "4"]
        import dettui.client

        at_once, dettui.client.PAGES_AT_ONCE = dettui.client.PAGES_AT_ONCE, 2
        try:  # pages asked two at a time after the first, then on from the last one's end
            every = await client.paged("/api/v1/experiments", "experiments", page_size=1)
            assert [e["id"] for e in every] == [1, 2, 3, 4]
        finally:
            dettui.client.PAGES_AT_ONCE = at_once


async def test_dettuis_clients_list_experiments_without_their_configs(api: Api) -> None:
    """`omitConfig=true` (dettui's own, for `dettui e list`, read as ListedExperiment without
    building the whole config): the same page, in every order and filter, without `config`
    and `originalConfig`; Determined's clients, which do not ask, get them."""
    grid = SIMPLE_CONFIG.replace("hyperparameters: {lr: 0.1}",
                                 "hyperparameters: {lr: {type: categorical, vals: [0.1, 0.2]},"
                                 " layers: 3}").replace("name: single", "name: grid")
    made = [await create(api), await create(api, grid), await create(api)]
    exp = made[0]["experiment"]["id"]
    await api.call("PATCH", f"/api/v1/experiments/{exp}",
                   {"name": "renamed", "description": "d", "labels": ["a", "b"]})
    await api.call("POST", f"/api/v1/experiments/{made[2]['experiment']['id']}/kill")
    queries = ["limit=2", "limit=10&orderBy=ORDER_BY_DESC", "limit=10&sortBy=SORT_BY_NAME",
               "limit=10&sortBy=SORT_BY_NUM_TRIALS&orderBy=ORDER_BY_DESC",
               "limit=10&sortBy=SORT_BY_USER", "offset=1&limit=1&sortBy=SORT_BY_STATE",
               "limit=10&states=STATE_ACTIVE", "limit=10&users=determined&archived=false"]
    for query in queries:
        full = await api.call("GET", f"/api/v1/experiments?{query}")
        lean = await api.call("GET", f"/api/v1/experiments?{query}&omitConfig=true")
        assert full["pagination"] == lean["pagination"], query
        assert [e["id"] for e in full["experiments"]] == [e["id"] for e in lean["experiments"]]
        assert full["experiments"], query
        for whole, part in zip(full["experiments"], lean["experiments"], strict=True):
            assert whole["config"]["searcher"]["metric"] == "loss" and whole["originalConfig"]
            assert part == {k: v for k, v in whole.items()
                            if k not in ("config", "originalConfig")}, query
    lean = await api.call("GET", "/api/v1/experiments?omitConfig=true")
    shown = {e["id"]: e for e in lean["experiments"]}
    assert shown[exp]["name"] == "renamed" and shown[exp]["labels"] == ["a", "b"]
    assert shown[made[1]["experiment"]["id"]]["hyperparameters"]["layers"] == {
        "type": "const", "val": 3}
    assert all(e["searcherMetric"] == "loss" for e in shown.values())

async def test_every_sort_of_every_list_answers_in_both_orders(api: Api) -> None:
    """Each sortBy value a list documents, ascending and descending, with and without a
    filter, is a 200 whose page holds what the unsorted one holds (SORT_BY_USER without a
    `users` filter was a 500: the owner's table was joined only for the filter)."""
    exp = (await create(api))["experiment"]["id"]
    await create(api)
    lists = [("/api/v1/experiments", "experiments", "sortBy", exp_store.EXPERIMENT_SORTS,
              ["", "&users=determined", "&omitConfig=true", "&states=STATE_ACTIVE"]),
             (f"/api/v1/experiments/{exp}/trials", "trials", "sortBy", trial_store.TRIAL_SORTS,
              ["", "&states=STATE_ACTIVE"]),
             (f"/api/v1/experiments/{exp}/checkpoints", "checkpoints", "sortByAttr",
              ckpt_store.CHECKPOINT_SORTS, ["", "&states=STATE_COMPLETED"])]
    for path, key, param, sorts, filters in lists:
        for extra in filters:
            plain = await api.call("GET", f"{path}?limit=100{extra}")
            for sort in sorts:
                for order in ("ORDER_BY_ASC", "ORDER_BY_DESC"):
                    got = await api.call(
                        "GET", f"{path}?limit=100&{param}={sort}&orderBy={order}{extra}")
                    assert got["pagination"]["total"] == plain["pagination"]["total"], sort
                    assert sorted(str(o.get("id", o.get("uuid"))) for o in got[key]) == sorted(
                        str(o.get("id", o.get("uuid"))) for o in plain[key]), (path, sort)
