"""Issue 29, attacks 5 and 8: hostile numbers and strings in request bodies, and metric reports
over their caps.

Every number a body carries is bounded where the body is parsed (`requests.Int64`,
`requests.Finite`, `body.decode_json`): NaN, ±Infinity, 1e999 and integers past 64 bits
are a 400 naming the field, never a 500 from the store; `true` is not an id; a string that is
not valid UTF-16 (a lone surrogate) is a 400. NaN and ±Infinity stay welcome as metric values,
where Determined sends them. A metrics report over its caps (keys, size) is a 400 naming the
cap, refused before any work on the event loop.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from dettui.master.store import metrics as metric_store
from tests.master.conftest import Api, agent_headers, allocate
from tests.master.test_api import create
from tests.master.test_unmanaged import new_experiment, new_trial

# Literal JSON text for each hostile value (NaN and Infinity are not JSON, but Python's `json`
# writes them, and 1e999 overflows a double).
HOSTILE = {
    "NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e999": "1e999",
    "2^63": str(2**63), "-2^63-1": str(-(2**63) - 1), "2^64": str(2**64),
    "-2^64": str(-(2**64)), "true": "true", "false": "false",
}
LONE = '"\\ud800"'  # a lone (high) surrogate: JSON text that is no Unicode string


def _metrics(steps: str = "1", run: str = "1", trial: str = "1") -> str:
    return ('{"group": "training", "metrics": {"trialId": TRIAL, "trialRunId": RUN, '
            '"stepsCompleted": STEPS, "metrics": {"avgMetrics": {"loss": 1.0}}}}'
            ).replace("TRIAL", trial).replace("RUN", run).replace("STEPS", steps)


def _checkpoint(storage: str = "null", steps: str = "1") -> str:
    return ('{"uuid": "00000000-0000-4000-8000-000000000001", "taskId": "TASK", '
            '"allocationId": null, "resources": {}, "storageId": STORAGE, '
            '"metadata": {"steps_completed": STEPS}}'
            ).replace("STORAGE", storage).replace("STEPS", steps)


# (attack, method, path, body with VALUE where the hostile value goes, what the 400 names)
TARGETS = [
    ("metrics_steps_completed", "POST", "/api/v1/trials/1/metrics", _metrics(steps="VALUE"),
     "stepsCompleted"),
    ("metrics_trial_run_id", "POST", "/api/v1/trials/1/metrics", _metrics(run="VALUE"),
     "trialRunId"),
    ("metrics_trial_id", "POST", "/api/v1/trials/1/metrics", _metrics(trial="VALUE"),
     "trialId"),
    ("checkpoint_storage_id", "POST", "/api/v1/checkpoints", _checkpoint(storage="VALUE"),
     "storageId"),
    ("checkpoint_steps_completed", "POST", "/api/v1/checkpoints", _checkpoint(steps="VALUE"),
     "steps_completed"),
    ("continue_id", "POST", "/api/v1/experiments/continue", '{"id": VALUE}', "id"),
    ("create_trial_experiment_id", "POST", "/api/v1/trials",
     '{"experimentId": VALUE, "unmanaged": true}', "experimentId"),
    ("start_run_id", "POST", "/api/v1/runs/start", '{"runId": VALUE}', "runId"),
    ("run_metadata_run_id", "POST", "/api/v1/runs/1/metadata",
     '{"runId": VALUE, "metadata": {}}', "runId"),
    ("start_trial_id", "POST", "/api/v1/trials/2/start", '{"trialId": VALUE}', "trialId"),
    ("patch_trial_id", "PATCH", "/api/v1/trials/2", '{"trialId": VALUE}', "trialId"),
    ("progress", "POST", "/api/v1/trials/1/progress", '{"progress": VALUE}', "progress"),
    ("job_priority", "POST", "/api/v1/job-queues",
     '{"updates": [{"jobId": "JOB", "priority": VALUE}]}', "priority"),
    ("experiment_priority", "PATCH", "/api/v1/experiments/1",
     '{"resources": {"priority": VALUE}}', "priority"),
    ("experiment_max_slots", "PATCH", "/api/v1/experiments/1",
     '{"resources": {"maxSlots": VALUE}}', "maxSlots"),
    ("task_log_rank", "POST", "/api/v1/task/logs",
     '{"logs": [{"taskId": "TASK", "log": "x", "rankId": VALUE}]}', "rankId"),
    ("source_info_trial_id", "POST", "/api/v1/trial-source-info",
     '{"trialSourceInfo": {"checkpointUuid": "00000000-0000-4000-8000-000000000001", '
     '"trialId": VALUE, "trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}}', "trialId"),
    ("source_info_model_id", "POST", "/api/v1/trial-source-info",
     '{"trialSourceInfo": {"checkpointUuid": "00000000-0000-4000-8000-000000000001", '
     '"trialId": 1, "modelId": VALUE, "trialSourceInfoType": '
     '"TRIAL_SOURCE_INFO_TYPE_INFERENCE"}}', "modelId"),
    ("run_metadata_value", "POST", "/api/v1/runs/1/metadata", '{"metadata": {"a": VALUE}}',
     "metadata.a"),
]
FREE_FORM = {"run_metadata_value"}  # any JSON value goes, booleans too (not NaN, not 2^64)
TASK_PATHS = ("/api/v1/trials/1/", "/api/v1/checkpoints", "/api/v1/runs/", "/api/v1/task/",
              "/api/v1/trial-source-info")
PLAIN = {"progress": "0.5", "start_trial_id": "2", "patch_trial_id": "2"}


async def _world(api: Api, tmp_path: Path) -> dict[str, str]:
    """Experiment 1 with trial 1 running (the headers of its allocation's token), and
    unmanaged experiment 2 with trial 2."""
    await create(api)
    _, token = await allocate(api, 1, "agent-x", [0])
    exp = (await new_experiment(api, tmp_path))["experiment"]
    assert (await new_trial(api, exp["id"]))["id"] == 2
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}


async def _send(api: Api, path: str, method: str, text: str,
                task: dict[str, str]) -> tuple[int, dict[str, Any]]:
    if "JOB" in text:
        job = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]["jobId"]
        text = text.replace("JOB", job)
    if "TASK" in text:
        text = text.replace("TASK", (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"])
    resp = await api.client.request(method, path, data=text.encode(),
                                    headers=task if path.startswith(TASK_PATHS) else api.headers())
    return resp.status, await resp.json()


@pytest.mark.parametrize(("attack", "method", "path", "template", "field"), TARGETS,
                         ids=[t[0] for t in TARGETS])
async def test_attack_5_hostile_numbers_in_bodies_are_400s_naming_the_field(
        api: Api, tmp_path: Path, attack: str, method: str, path: str, template: str,
        field: str) -> None:
    """NaN, ±Infinity, 1e999, ±2^63, ±2^64 and booleans where a number goes: a 400 that names
    the field (they were 500s, or `true` read as 1). The same body with a plain number is not
    refused for that field: the hostile value is what the 400 is about."""
    task = await _world(api, tmp_path)
    plain = template.replace("VALUE", PLAIN.get(attack, "1"))
    status, body = await _send(api, path, method, plain, task)
    assert status == 200 or field not in body.get("message", ""), (status, body)
    for value, text in HOSTILE.items():
        if attack in FREE_FORM and value in ("true", "false"):
            continue  # a boolean is a fine value in free-form metadata
        status, body = await _send(api, path, method, template.replace("VALUE", text), task)
        assert status == 400, (value, status, body)
        assert field in body["message"], (value, body)


@pytest.mark.parametrize("text", [
    '{"description": "\\ud800"}', '{"description": "a\\udc00b"}', '{"name": "\\udbff"}',
    '{"description": "ok", "labels": ["\\ud800"]}', '{"\\ud800": 1, "description": "x"}',
])
async def test_attack_5_a_lone_surrogate_in_a_patched_description_is_a_400(
        api: Api, text: str) -> None:
    """JSON text that is no Unicode string (a lone UTF-16 surrogate) was a 500 where the
    store encoded it; a valid pair (an emoji) is kept."""
    await create(api)
    resp = await api.client.patch("/api/v1/experiments/1", data=text.encode(),
                                  headers=api.headers())
    body = await resp.json()
    assert resp.status == 400, body
    assert "lone surrogate" in body["message"], body
    await api.call("PATCH", "/api/v1/experiments/1", raw=b'{"description": "\\ud83d\\ude00"}')
    exp = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]
    assert exp["description"] == "\U0001f600"


async def test_attack_5_true_is_not_an_experiment_id(api: Api) -> None:
    """`{"id": true}` continued experiment 1; now a 400, and nothing changes."""
    await create(api)
    await api.call("POST", "/api/v1/experiments/1/kill")
    before = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]
    body = await api.call("POST", "/api/v1/experiments/continue", raw=b'{"id": true}',
                          status=400)
    assert body["message"] == "invalid request body: id: Value error, a boolean is not a number"
    after = (await api.call("GET", "/api/v1/experiments/1"))["experiment"]
    assert after["state"] == before["state"]


@pytest.mark.parametrize(("path", "status"), [
    ("/api/v1/experiments/99999999999999999999", 400),
    ("/api/v1/experiments/9223372036854775807", 404),
    ("/api/v1/experiments/9223372036854775808", 400),
    ("/api/v1/trials/18446744073709551616/metrics", 400),
    ("/api/v1/trials/9223372036854775807", 404),
    ("/api/v1/experiments?limit=1e999", 400), ("/api/v1/experiments?limit=NaN", 400),
    ("/api/v1/experiments?offset=-99999999999999999999", 400),
    ("/api/v1/experiments?offset=-9223372036854775808", 400),
    ("/api/v1/experiments?offset=-1", 200), ("/api/v1/experiments?limit=true", 400),
    ("/api/v1/trials/1/metrics?limit=9223372036854775808", 400),
])
async def test_attack_5_huge_path_ids_and_query_numbers_are_400_or_404(
        api: Api, path: str, status: int) -> None:
    """Ids and numbers in paths and queries, on both stores (PostgreSQL's columns are BIGINT:
    an id at the top of int64 is a 404 there too, not an out-of-range error)."""
    await create(api)
    got = await api.call("GET", path, status=status)
    assert ("experiments" in got) if status == 200 else got["message"], got


async def test_attack_5_nan_and_infinity_stay_welcome_as_metric_values(api: Api,
                                                                       tmp_path: Path) -> None:
    """Determined's strings and Python's tokens, in avgMetrics and batchMetrics: stored and
    read back as Determined's strings. The same tokens elsewhere in the body are a 400."""
    task = await _world(api, tmp_path)
    text = ('{"group": "training", "metrics": {"trialId": 1, "trialRunId": 1, '
            '"stepsCompleted": 1, "metrics": {"avgMetrics": {"a": NaN, "b": -Infinity, '
            '"c": "Infinity", "d": [NaN]}, "batchMetrics": [{"a": Infinity}]}}}')
    status, body = await _send(api, "/api/v1/trials/1/metrics", "POST", text, task)
    assert status == 200, body
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    assert rows[0]["metrics"]["avgMetrics"] == {"a": "NaN", "b": "-Infinity", "c": "Infinity",
                                                "d": ["NaN"]}
    status, body = await _send(api, "/api/v1/trials/1/metrics", "POST",
                               text.replace('"stepsCompleted": 1', '"stepsCompleted": NaN'),
                               task)
    assert status == 400 and "stepsCompleted" in body["message"], body


def _report(avg: Any, batch: Any = None) -> dict[str, Any]:
    return {"group": "training", "metrics": {
        "trialId": 1, "trialRunId": 1, "stepsCompleted": 1,
        "metrics": {"avgMetrics": avg, "batchMetrics": batch}}}


@pytest.mark.parametrize(("attack", "avg", "batch", "cap"), [
    ("keys", {f"k{i}": 1.0 for i in range(1_001)}, None, "1,000 metrics"),
    ("nested_dict", {"loss": 1.0, "more": {f"k{i}": i for i in range(1_000)}}, None,
     "1,000 metrics"),
    ("nested_list", {"hist": list(range(1_001))}, None, "1,000 metrics"),
    ("deep", {"a": [{"b": [0] * 600}, {"c": [0] * 600}]}, None, "1,000 metrics"),
    ("batch_entries", {"loss": 1.0}, [{"x": 1}] * 1_001, "1,000 metrics"),
    ("batch_entry_keys", {"loss": 1.0}, [{f"k{i}": 1 for i in range(1_001)}],
     "1,000 metrics"),
    ("bytes", {"blob": "x" * (1024 * 1024)}, None, "1,048,576 bytes"),
    ("key_bytes", {"k" * 600_000: 1, "j" * 600_000: 2}, None, "1,048,576 bytes"),
])
async def test_attack_8_metric_reports_over_their_caps_are_400s_naming_the_cap(
        api: Api, tmp_path: Path, attack: str, avg: Any, batch: Any, cap: str) -> None:
    task = await _world(api, tmp_path)
    for path, body in (("/api/v1/trials/1/metrics", _report(avg, batch)),
                       ("/api/v1/trials/1/metrics/batch", {"reports": [_report(avg, batch)]})):
        got = await api.call("POST", path, body, headers=task, status=400)
        assert cap in got["message"], got
    assert (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"] == []


async def test_attack_8_a_report_at_the_caps_is_stored(api: Api, tmp_path: Path) -> None:
    task = await _world(api, tmp_path)
    avg = {f"k{i}": float(i) for i in range(1_000)}
    await api.call("POST", "/api/v1/trials/1/metrics", _report(avg, [{"x": 1}] * 1_000),
                   headers=task)
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    assert len(rows[0]["metrics"]["avgMetrics"]) == 1_000


async def test_attack_8_a_report_of_300000_keys_is_refused_at_once(
        api: Api, tmp_path: Path) -> None:
    """The report that stalled the master 6.9 s (300,000 keys, 5.5 MB): one request is over
    the route's body cap (a 413 naming it, before it is read whole); in a batch, whose body
    may be larger, it is a 400 naming the cap of keys. The master answers meanwhile, and the
    trial's summary stays small."""
    task = await _world(api, tmp_path)
    avg = {f"metric_{i}": 0.5 for i in range(300_000)}
    raw = json.dumps(_report(avg)).encode()
    assert len(raw) > 5_000_000
    started = time.monotonic()
    got = await api.call("POST", "/api/v1/trials/1/metrics", raw=raw, headers=task, status=413)
    assert f"{metric_store.MAX_REPORT_BODY:,} bytes" in got["message"], got
    batch = json.dumps({"reports": [_report(avg)]}).encode()
    got = await api.call("POST", "/api/v1/trials/1/metrics/batch", raw=batch, headers=task,
                         status=400)
    assert "more than 1,000 metrics" in got["message"], got
    took = time.monotonic() - started
    assert took < 30.0, f"refusing took {took:.1f} s"  # no hang; speed is the bench's
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert len(json.dumps(trial)) < 20_000


@pytest.mark.parametrize(("field", "line"), [
    ("timestamp", '"timestamp": "NaN"'), ("timestamp", '"timestamp": "Infinity"'),
    ("timestamp", '"timestamp": 1e308'), ("timestamp", '"timestamp": true'),
    ("seq", '"timestamp": 1, "seq": true'), ("seq", '"timestamp": 1, "seq": -1'),
    ("rankId", '"timestamp": 1, "rankId": 9223372036854775807.0'),
])
async def test_attack_5_hostile_numbers_from_an_agent_are_400s(api: Api, field: str,
                                                               line: str) -> None:
    """The agent protocol's bodies use the same numbers: a log line timed "NaN" was a 500 (the
    store's NOT NULL), one timed Infinity or 1e308 broke every later read of the trial's logs
    (no date shows it)."""
    await create(api)
    agent = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",  # no slots: the scheduler cannot start
                   {"id": "agent-x", "slots": []}, headers=agent)  # the trial before the test
    alloc, _ = await allocate(api, 1, "agent-x", [0])
    raw = f'{{"logs": [{{"allocationId": "{alloc.id}", "log": "x", {line}}}]}}'.encode()
    body = await api.call("POST", "/api/v1/agents/agent-x/logs", raw=raw, headers=agent,
                          status=400)
    assert f"logs.0.{field}" in body["message"], body
    body = await api.call("POST", f"/api/v1/agents/agent-x/allocations/{alloc.id}/exit",
                          raw=b'{"exitCode": true}', headers=agent, status=400)
    assert "exitCode" in body["message"], body
    logs = await api.call("GET", "/api/v1/trials/1/logs")
    assert "x\n" not in str(logs)


async def test_attack_8_a_trials_summary_keeps_1000_names_however_many_reports_add(
        api: Api, tmp_path: Path) -> None:
    """Reports within their caps that each bring new names would grow the trial's summary
    (what its view shows) without end, and every report's fold with it: the summary keeps the
    first 1,000 names of a group, the reports are stored whole, and a refresh (after a merge)
    keeps the same bound."""
    task = await _world(api, tmp_path)
    for steps, prefix in ((1, "a"), (2, "b"), (3, "c")):
        avg = {f"{prefix}{i}": float(i) for i in range(600)}
        await api.call("POST", "/api/v1/trials/1/metrics",
                       {**_report(avg), "metrics": {**_report(avg)["metrics"],
                                                    "stepsCompleted": steps}}, headers=task)

    async def summary() -> dict[str, Any]:
        trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
        return dict(trial["summaryMetrics"]["avg_metrics"])

    kept = await summary()
    assert len(kept) == metric_store.MAX_SUMMARY_METRICS
    assert "a599" in kept and "b399" in kept and "b400" not in kept and "c0" not in kept
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    assert [len(r["metrics"]["avgMetrics"]) for r in rows] == [600, 600, 600]
    merged = _report({"z": 1.0})  # a merge into step 1's report folds every report again
    await api.call("POST", "/api/v1/trials/1/metrics", merged, headers=task)
    again = await summary()
    assert len(again) == metric_store.MAX_SUMMARY_METRICS and "c0" not in again
