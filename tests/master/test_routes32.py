"""Issue 32's routes in-process: the master's config (secrets redacted) and its own log lines,
labels one at a time, log retention, preview of a search, usage from allocation history."""

from __future__ import annotations

import json
import logging
from datetime import UTC, date, datetime
from typing import Any

import pytest

from dettui.config.schema import Searcher
from dettui.master.http import appkeys
from dettui.master.searcher.preview import simulate
from dettui.master.usage import AllocationUse, aggregated, aggregated_rows, allocation_rows
from dettui.master.views.master_config import effective, redact_url
from tests.master.conftest import Api, allocate
from tests.master.test_api import create


async def _admin(api: Api) -> str:
    resp = await api.client.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    return str((await resp.json())["token"])


async def test_master_config_is_for_admins_and_hides_secrets(api: Api) -> None:
    await api.call("GET", "/api/v1/master/config", status=403)
    conf = (await api.call("GET", "/api/v1/master/config",
                           headers=api.headers(await _admin(api))))["config"]
    assert conf["cluster_name"] == "dettui" and conf["resource_pools"][0]["pool_name"]
    settings = api.client.server.app[appkeys.SETTINGS]
    from dataclasses import replace

    secret = replace(settings, admin_password="hunter2-Pass",
                     db_url="postgresql://me:s3cret@db:5432/x?password=other")
    text = json.dumps(effective(secret, "c"))
    assert "hunter2" not in text and "s3cret" not in text and "other" not in text
    assert redact_url("postgresql://me@db/x") == "postgresql://me@db/x"


async def test_master_logs_hold_the_masters_lines(api: Api,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)  # as `dettui serve` logs
    buffer = api.client.server.app[appkeys.MASTER_LOG]
    logging.getLogger("dettui.master").info("a line of issue 32")
    resp = await api.client.get("/api/v1/master/logs", headers=api.headers())
    lines = [json.loads(x)["result"]["logEntry"] for x in (await resp.text()).splitlines()]
    assert any("a line of issue 32" in e["message"] for e in lines), lines[-5:]
    assert {"id", "message", "timestamp", "level"} <= set(lines[-1])
    tail = await api.client.get("/api/v1/master/logs?offset=-1", headers=api.headers())
    assert len((await tail.text()).splitlines()) == 1
    assert buffer.last_id() >= lines[-1]["id"]


async def test_labels_one_at_a_time(api: Api) -> None:
    exp = (await create(api))["experiment"]
    path = f"/api/v1/experiments/{exp['id']}/labels"
    assert (await api.call("PUT", f"{path}/a"))["labels"] == ["a"]
    assert (await api.call("PUT", f"{path}/b"))["labels"] == ["a", "b"]
    assert (await api.call("PUT", f"{path}/a"))["labels"] == ["a", "b"]
    assert (await api.call("DELETE", f"{path}/a"))["labels"] == ["b"]
    got = await api.call("GET", f"/api/v1/experiments/{exp['id']}")
    assert got["experiment"]["labels"] == ["b"]
    await api.call("PUT", f"{path}/{'x' * 300}", status=400)
    await api.call("PUT", "/api/v1/experiments/999/labels/a", status=404)


async def test_log_retention_forever_is_kept_and_days_are_refused_clearly(api: Api) -> None:
    exp = (await create(api))["experiment"]
    path = f"/api/v1/experiments/{exp['id']}/retain_logs"
    await api.call("PUT", path, {"numDays": -1})
    refused = await api.call("PUT", path, {"numDays": 5}, status=400)
    assert "kept until its experiment is deleted" in refused["message"]
    await api.call("PUT", path, {"numDays": 99999}, status=400)


def test_preview_counts_as_determined_simulates() -> None:
    grid = simulate(Searcher(name="grid", metric="m"), {
        "a": {"type": "categorical", "vals": [1, 2, 3]}, "b": {"type": "const", "val": 1}})
    assert grid == [{"count": 3, "unit": {"maxLength": True}}]
    asha = simulate(Searcher(name="adaptive_asha", metric="m", max_trials=16, max_time=64,
                             time_metric="batches", mode="aggressive", max_rungs=3), {})
    # one bracket of 3 rungs (4, 16, 64 batches): 16 trials, 12 stop at 4, 3 at 16, 1 runs on
    assert asha == [{"count": n, "unit": {"maxLength": False, "name": "batches", "value": v}}
                    for n, v in ((12, 4), (3, 16), (1, 64))]


async def test_preview_route_answers_determineds_shape(api: Api) -> None:
    config = {"searcher": {"name": "random", "metric": "m", "max_trials": 7},
              "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}}}
    got = await api.call("POST", "/api/v1/preview-hp-search", {"config": config})
    assert got["summary"]["trials"] == [{"count": 7, "unit": {"maxLength": True}}]
    assert got["summary"]["config"]["name"] == "random"
    await api.call("POST", "/api/v1/preview-hp-search", {"config": {"searcher": {
        "name": "random", "metric": "m"}}}, status=400)


def _t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_usage_splits_allocations_by_day() -> None:
    use = AllocationUse("a.1", 3, "ann", ("x",), "default", 2, _t("2026-01-01T23:00:00"),
                        _t("2026-01-02T01:00:00"))
    rows = allocation_rows([use], _t("2026-01-02T00:00:00"), _t("2026-01-03T00:00:00"), 0)
    assert rows[0][0] == "a.1" and rows[0][9] == "2.000000"  # 1 h of 2 slots in the range
    days = aggregated([use], date(2026, 1, 1), date(2026, 1, 5), False, 0)
    assert [(d["periodStart"], d["seconds"]) for d in days] == [
        ("2026-01-01", 7200.0), ("2026-01-02", 7200.0)]
    assert days[0]["byExperimentLabel"] == {"x": 7200.0}
    assert aggregated_rows(days)[-1] == ["total", "total", "2026-01-02", "7200.000000"]
    months = aggregated([use], date(2026, 1, 1), date(2026, 2, 1), True, 0)
    assert [(m["periodStart"], m["seconds"]) for m in months] == [("2026-01", 14400.0)]


async def test_usage_routes_read_the_allocation_history(api: Api) -> None:
    exp = (await create(api))["experiment"]
    trials = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"]
    await allocate(api, trials[0]["id"])
    resp = await api.client.get("/resources/allocation/allocations-csv?timestamp_after="
                                "2020-01-01T00:00:00Z&timestamp_before=2099-01-01T00:00:00Z",
                                headers=api.headers())
    lines = (await resp.text()).splitlines()
    assert lines[0].startswith("allocation_id,task_type,username") and len(lines) == 2
    assert ",determined,Uncategorized," in lines[1]
    today = date.today().isoformat()
    got: Any = await api.call(
        "GET", f"/api/v1/resources/allocation/aggregated?start_date={today}&end_date={today}"
        "&period=RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY")
    assert isinstance(got["resourceEntries"], list)
    await api.call("GET", "/resources/allocation/allocations-csv?timestamp_after=x"
                   "&timestamp_before=y", status=400)


async def test_a_trial_of_a_disabled_agent_is_told_so(api: Api) -> None:
    """A trial still stopping after its agent was disabled calls with its ended allocation's
    token: the answer says so, not "log in first"."""
    from tests.master.conftest import agent_headers
    from tests.master.test_auth import as_user

    exp = (await create(api))["experiment"]  # no agent yet: it waits
    trial = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"][0]
    alloc, token = await allocate(api, trial["id"], "a1")
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",
                   {"id": "a1", "slots": [{"id": 0, "type": "cpu"}]}, headers=agent)
    await (await as_user(api, "admin")).call("POST", "/api/v1/agents/a1/disable", {})
    told = await api.call("GET", f"/api/v1/trials/{trial['id']}", status=401, headers={
        "Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    assert "agent a1 was disabled" in told["message"] and alloc.id in told["message"], told
    other = await api.call("GET", "/api/v1/trials/1", status=401, headers={
        "Grpc-Metadata-x-allocation-token": "Bearer nope"})
    assert "log in first" in other["message"]


async def test_ended_jobs_cannot_be_updated(api: Api) -> None:
    exp = (await create(api))["experiment"]
    await api.call("POST", f"/api/v1/experiments/{exp['id']}/kill")
    body = {"updates": [{"jobId": exp["jobId"], "priority": 3}]}
    refused = await api.call("POST", "/api/v1/job-queues", body, status=404)
    assert refused["message"] == f"job {exp['jobId']} not found"


async def test_one_workspace_and_no_templates_are_listed(api: Api) -> None:
    await create(api)
    (one,) = (await api.call("GET", "/api/v1/workspaces"))["workspaces"]
    assert one["id"] == 1 and one["name"] == "Uncategorized" and one["numExperiments"] == 1
    assert (await api.call("GET", "/api/v1/templates"))["templates"] == []
    await api.call("GET", "/api/v1/workspaces/1/projects", status=501)
    await api.call("GET", "/api/v1/templates/x", status=501)


async def test_operations_dettui_lacks_say_so(api: Api) -> None:
    """Not routes (nothing to fuzz): the not-supported answer with what to do instead."""
    for method, path in (("PATCH", "/api/v1/master/config"),
                         ("PUT", "/api/v1/master/cluster_message"),
                         ("GET", "/resources/allocation/raw")):
        told = await api.call(method, path, {}, status=501)
        assert "not supported by dettui" in told["message"], (path, told)
