"""The master-side findings of the attack review of issue 33, each scaled down to its bound:
newest-first logs read a page at a time, metric keys capped per report and per merged step,
heartbeat samples capped, hyperparameters as valid JSON, log levels by Determined's names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dettui.master.routes import agents as agent_route
from dettui.master.routes import logs as log_route
from dettui.master.store import logs as log_store
from dettui.master.store import metrics as metric_store
from dettui.protocol import MAX_HEARTBEAT_SAMPLES
from tests.master.conftest import Api, agent_headers, allocate
from tests.master.test_api import create
from tests.master.test_log_paging import fill, read


def _spy_fetch(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The `limit` of every read of the log store (0: no limit)."""
    limits: list[int] = []
    real = log_store.fetch

    def fetch(*args: Any, **kwargs: Any) -> list[log_store.LogLine]:
        limits.append(int(kwargs.get("limit", 0)))
        return real(*args, **kwargs)

    monkeypatch.setattr(log_store, "fetch", fetch)
    return limits


@pytest.mark.parametrize("query", ["", "&limit=1000000", "&limit=-1", "&limit=17"])
async def test_newest_first_logs_are_read_a_page_at_a_time(
        api: Api, monkeypatch: pytest.MonkeyPatch, query: str) -> None:
    await create(api)
    await fill(api, 23)
    monkeypatch.setattr(log_route, "LOG_BATCH", 5)
    limits = _spy_fetch(monkeypatch)
    got = await read(api, f"orderBy=ORDER_BY_DESC{query}")
    want = 17 if query.endswith("=17") else 23
    assert [p["log"] for p in got] == [f"line {i}\n" for i in reversed(range(23))][:want]
    assert limits and all(0 < n <= 5 for n in limits), limits


async def test_newest_first_after_an_id_is_paged_and_follows_from_the_newest(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    await create(api)
    await fill(api, 12)
    ids = [int(p["id"]) for p in await read(api, "follow=false")]
    monkeypatch.setattr(log_route, "LOG_BATCH", 4)
    limits = _spy_fetch(monkeypatch)
    got = await read(api, f"orderBy=ORDER_BY_DESC&idAfter={ids[1]}")
    assert [p["log"] for p in got] == [f"line {i}\n" for i in reversed(range(2, 12))]
    assert all(0 < n <= 4 for n in limits), limits
    resp = await api.client.get(
        f"/api/v1/trials/1/logs?orderBy=ORDER_BY_DESC&idAfter={ids[9]}&follow=true",
        headers=api.headers())
    got = [json.loads(await resp.content.readline())["result"]["log"] for _ in range(2)]
    assert got == ["line 11\n", "line 10\n"]
    await fill(api, 1)  # only the new line follows, not the page again
    assert json.loads(await resp.content.readline())["result"]["log"] == "line 0\n"
    resp.close()


async def _task_headers(api: Api) -> dict[str, str]:
    await create(api)
    _, token = await allocate(api, 1, "agent-x", [0])
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}


def _one_key(name: str, steps: int = 8, group: str = "training") -> dict[str, Any]:
    return {"group": group, "metrics": {"trialId": 1, "trialRunId": 1, "stepsCompleted": steps,
                                        "metrics": {"avgMetrics": {name: 1.0}}}}


async def test_reports_merged_at_one_step_hold_at_most_the_cap_and_merge_once(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    headers = await _task_headers(api)
    monkeypatch.setattr(metric_store, "MAX_METRIC_KEYS", 20)
    merges, refreshes = _count(monkeypatch, "_merge"), _count(monkeypatch, "refresh_trial")
    batch = [_one_key("loss", steps=4)] + [_one_key(f"k{i}") for i in range(50)]
    got = await api.call("POST", "/api/v1/trials/1/metrics/batch", {"reports": batch},
                         headers=headers)
    assert [r["index"] for r in got["refused"]] == list(range(21, 51))
    assert "more than 20 metrics in the training reports at step 8" in \
        got["refused"][0]["message"]
    # The step's first 20 reports: one insert; the next 30, two merges refused whole.
    assert len(merges) == 2 and refreshes == []
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    at8 = next(m for m in rows if m["stepsCompleted"] == 8)
    assert sorted(at8["metrics"]["avgMetrics"]) == sorted(f"k{i}" for i in range(20))
    # One report more at that step, alone: a 400 naming the cap; a key of room is merged.
    refused = await api.call("POST", "/api/v1/trials/1/metrics", _one_key("k99"),
                             headers=headers, status=400)
    assert "more than 20 metrics" in refused["message"]
    await api.call("POST", "/api/v1/trials/1/metrics", _one_key("x", steps=4), headers=headers)
    assert len(merges) == 4 and len(refreshes) == 1
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert {"loss", "x", "k0", "k19"} <= set(trial["summaryMetrics"]["avg_metrics"])


async def test_a_batch_merged_into_a_stored_step_refreshes_its_trial_once(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    headers = await _task_headers(api)
    await api.call("POST", "/api/v1/trials/1/metrics", _one_key("loss"), headers=headers)
    refreshes = _count(monkeypatch, "refresh_trial")
    # Reports of one step that cannot be merged before (a key twice) each merge in the store.
    batch = [_one_key(f"k{i % 5}") for i in range(15)] + [_one_key("v", group="validation")]
    for i, r in enumerate(batch[:15]):
        r["metrics"]["metrics"]["avgMetrics"][f"k{i % 5}"] = float(i)
    got = await api.call("POST", "/api/v1/trials/1/metrics/batch", {"reports": batch},
                         headers=headers)
    assert len(got["refused"]) == 10  # "overwriting existing metric keys" as before
    assert len(refreshes) == 1
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert {"loss", "k0", "k4"} <= set(trial["summaryMetrics"]["avg_metrics"])


def _count(monkeypatch: pytest.MonkeyPatch, name: str) -> list[None]:
    """A list that grows by one at each call of the metric store's function `name`."""
    calls: list[None] = []
    real = getattr(metric_store, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(None)
        return real(*args, **kwargs)

    monkeypatch.setattr(metric_store, name, counted)
    return calls


async def test_a_heartbeat_over_the_sample_cap_is_refused_before_any_is_parsed(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",
                   {"id": "box", "slots": [{"id": 0}], "hostname": "box"}, headers=creds)
    parsed: list[object] = []
    real = agent_route.telemetry_sample
    monkeypatch.setattr(agent_route, "telemetry_sample",
                        lambda raw: parsed.append(raw) or real(raw))
    many = [{"time": 1.0 + i, "cpuPercent": 1.0} for i in range(MAX_HEARTBEAT_SAMPLES + 1)]
    refused = await api.call("POST", "/api/v1/agents/box/heartbeat", {"samples": many},
                             headers=creds, status=400)
    assert f"at most {MAX_HEARTBEAT_SAMPLES}" in refused["message"], refused
    assert parsed == []
    huge = {"samples": [{"time": 1.0, "cpuPercent": 1.0}] * 150_000}  # 5 MiB, decoded never
    await api.call("POST", "/api/v1/agents/box/heartbeat", huge, headers=creds, status=413)
    await api.call("POST", "/api/v1/agents/box/heartbeat", {"samples": many[1:]},
                   headers=creds)
    assert len(parsed) == MAX_HEARTBEAT_SAMPLES
    history = (await api.call("GET", "/api/v1/agents"))["agents"][0]["telemetry"]["history"]
    assert history["time"] == [2.0 + i for i in range(MAX_HEARTBEAT_SAMPLES)]


async def test_task_log_levels_are_determined_names_only(api: Api) -> None:
    headers = await _task_headers(api)
    task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]

    async def post(level: str, status: int = 200) -> Any:
        return await api.call("POST", "/api/v1/task/logs", {"logs": [
            {"taskId": task_id, "level": level, "log": f"{level[:20]}\n"}]},
            headers=headers, status=status)

    for bad in ("X" * 100_000, "INFO", "LOG_LEVEL_info", "LOG_LEVEL_"):
        refused = await post(bad, status=400)
        assert "must be one of LOG_LEVEL_UNSPECIFIED, LOG_LEVEL_TRACE" in refused["message"]
        assert len(refused["message"]) < 1000
    await post("LOG_LEVEL_WARNING")
    await post("LOG_LEVEL_UNSPECIFIED")
    got = (await read(api, "sources=task"))[-2:]  # (after the master's line of the attempt)
    assert [(p["log"], p["level"]) for p in got] == [
        ("LOG_LEVEL_WARNING\n", "LOG_LEVEL_WARNING"),
        ("LOG_LEVEL_UNSPECIFIE\n", "LOG_LEVEL_UNSPECIFIED")]
    assert "WARNING: LOG_LEVEL_WARNING" in got[0]["message"]
    assert "UNSPECIFIED:" not in got[1]["message"]


@pytest.mark.parametrize("big", ["", "big: 1000000000000000000000000000000, "])
async def test_hyperparameters_that_are_not_finite_read_back_as_valid_json(
        api: Api, big: str) -> None:
    """(A 100-bit integer among them sent the trials' JSON through `json`, which wrote bare
    `Infinity`; without one, orjson wrote `null`.)"""
    await create(api, "name: t\nentrypoint: python3 train.py\n"
                      "searcher: {name: single, metric: loss, max_length: {batches: 10}}\n"
                      f"hyperparameters: {{{big}up: .inf, down: -.inf, odd: .nan,"
                      " nested: {x: [1.5, .inf]}}\n")
    resp = await api.client.get("/api/v1/experiments/1/trials", headers=api.headers())
    text = await resp.text()
    assert resp.status == 200, text
    hp = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in {text}"))[
        "trials"][0]["hparams"]
    assert (hp["up"], hp["down"], hp["odd"]) == ("Infinity", "-Infinity", "NaN")
    assert hp["nested"] == {"x": [1.5, "Infinity"]}
