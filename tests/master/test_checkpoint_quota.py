"""Checkpoint storage usage and quotas (issue 29, build item 5): an experiment's usage (bytes and
count of its checkpoints that hold files) is kept on its row with every report, deletion and GC
and shown in GET experiment and the list; a report over the master's quota (per experiment,
per user) is refused with a message naming the quota, the usage and what to delete, the trial's
log says so and its experiment stops in ERROR; deleting frees quota. Both stores.

The master here has a quota of 4000 bytes per experiment and 6000 per user."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from dettui import byte_size
from dettui.errors import ConfigError
from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings, load_master_config, settings_from
from dettui.master.store import db as dbmod
from dettui.master.store import exits
from tests.master.conftest import Api, allocate, ckpt_uuid
from tests.master.test_api import create
from tests.master.test_trial_writes import Lab, lab

PER_EXPERIMENT, PER_USER = 4000, 6000


@pytest.fixture
async def api(master_settings: MasterSettings, aiohttp_client: Any) -> Api:
    """The conftest's master, with the quotas."""
    client = await aiohttp_client(create_app(dataclasses.replace(
        master_settings, checkpoint_quota=PER_EXPERIMENT, checkpoint_quota_per_user=PER_USER)))
    resp = await client.post("/api/v1/auth/login",
                             data='{"username":"determined","password":""}')
    return Api(client, (await resp.json())["token"])


def body(lab: Lab, uuid: str, *sizes: int | str, task_id: str | None = None,
         alloc_id: str | None = None) -> dict[str, Any]:
    return {"uuid": uuid, "taskId": task_id or lab.task_id,
            "allocationId": alloc_id or lab.alloc.id,
            "resources": {f"f{i}": str(s) for i, s in enumerate(sizes)},
            "metadata": {"steps_completed": 1}}


async def report(lab: Lab, uuid: str, *sizes: int | str, status: int = 200) -> Any:
    return await lab.alice.call("POST", "/api/v1/checkpoints", body(lab, uuid, *sizes),
                                status=status, headers=lab.task(lab.token))


async def usage(api: Api, exp_id: int) -> tuple[str, int]:
    exp = (await api.call("GET", f"/api/v1/experiments/{exp_id}"))["experiment"]
    return exp["checkpointSize"], exp["checkpointCount"]


async def listed(api: Api, exp_id: int, sort: str = "") -> dict[str, Any]:
    exps = (await api.call("GET", f"/api/v1/experiments?limit=100{sort}"))["experiments"]
    return next(e for e in exps if e["id"] == exp_id)


async def test_usage_shown_in_experiment_and_list(api: Api) -> None:
    """checkpointSize (an int64 as a string, as Determined's) and checkpointCount, in GET
    experiment and in the list (once 0 there); a re-report counts its new size once; garbage
    or negative sizes count 0; a partial deletion counts what is left, a deletion nothing."""
    the = await lab(api)
    assert await usage(api, the.trial) == ("0", 0)
    await report(the, ckpt_uuid(1), 1000, 500)
    await report(the, ckpt_uuid(2), 1200, "-900", "x", "1e3")
    assert await usage(api, the.trial) == ("2700", 2)
    await report(the, ckpt_uuid(2), 1300)  # the client's retry, with other sizes
    assert await usage(api, the.trial) == ("2800", 2)
    row = await listed(api, the.trial)
    assert (row["checkpointSize"], row["checkpointCount"]) == ("2800", 2)
    await the.alice.call("PATCH", "/api/v1/checkpoints", {"checkpoints": [
        {"uuid": ckpt_uuid(1), "resources": {"resources": {"f0": "1000"}}}]},
        headers=the.task(the.token))
    assert await usage(api, the.trial) == ("2300", 2)  # PARTIALLY_DELETED: 1000 left
    await the.alice.call("DELETE", "/api/v1/checkpoints",
                         {"checkpointUuids": [ckpt_uuid(2)]})
    assert await usage(api, the.trial) == ("1000", 1)
    for sort in ("SORT_BY_CHECKPOINT_SIZE", "SORT_BY_CHECKPOINT_COUNT"):
        exps = (await api.call("GET", f"/api/v1/experiments?sortBy={sort}&orderBy=ORDER_BY_DESC"
                               ))["experiments"]
        assert [e["id"] for e in exps] == [the.trial, the.bob_trial]


async def test_report_over_quota_is_refused_and_stops_the_experiment(api: Api) -> None:
    """A report that would take the experiment past 4000 bytes is a 429 naming the quota, the
    usage and what to delete; it is not recorded, the trial's log says why (source master),
    the experiment stops in ERROR (its allocation asked to stop), and ends ERROR when the
    trial exits."""
    the = await lab(api)
    await report(the, ckpt_uuid(1), 3000)
    refused = await report(the, ckpt_uuid(2), 1500, status=429)
    message = refused["message"]
    for part in (f"checkpoint {ckpt_uuid(2)} of trial {the.trial}", "4.4 KiB",
                 "over its quota of 3.9 KiB", "checkpoint_storage_quota",
                 "2.9 KiB in 1 checkpoint(s)", "dettui checkpoint delete",
                 f"dettui checkpoint list {the.trial}", "save_trial_best",
                 f"Experiment {the.trial} stops in ERROR"):
        assert part in message, (part, message)
    await the.alice.call("GET", f"/api/v1/checkpoints/{ckpt_uuid(2)}", status=404)
    assert await usage(api, the.trial) == ("3000", 1)
    resp = await api.client.get(f"/api/v1/trials/{the.trial}/logs", headers=api.headers())
    logs = [json.loads(line)["result"] for line in (await resp.text()).splitlines()][1:]
    assert [(x["source"], x["level"], x["log"]) for x in logs] == [  # after the start marker
        ("master", "LOG_LEVEL_ERROR", message + "\n")]
    exp = (await api.call("GET", f"/api/v1/experiments/{the.trial}"))["experiment"]
    assert exp["state"] == "STATE_STOPPING_ERROR"
    pre = await the.alice.call("GET", f"/api/v1/allocations/{the.alloc.id}/signals/"
                                      "preemption?timeout_seconds=0", headers=the.task(the.token))
    assert pre == {"preempt": True}
    cluster = api.client.server.app[appkeys.CLUSTER]
    await cluster.dispatcher.run(exits.end, the.alloc.id, 1, "")  # the Core API raised: exit 1
    trial = (await api.call("GET", f"/api/v1/trials/{the.trial}"))["trial"]
    assert trial["state"] == "STATE_ERROR"
    exp = (await api.call("GET", f"/api/v1/experiments/{the.trial}"))["experiment"]
    assert exp["state"] == "STATE_ERROR"
    bob = (await api.call("GET", f"/api/v1/experiments/{the.bob_trial}"))["experiment"]
    assert bob["state"] == "STATE_ACTIVE"  # another experiment goes on


async def test_deleting_checkpoints_frees_quota(api: Api) -> None:
    """What `dettui checkpoint delete` (and GC) frees counts at once; negative sizes cannot
    lower the usage."""
    the = await lab(api)
    await report(the, ckpt_uuid(1), 3000)
    await report(the, ckpt_uuid(2), "-3000", "0")  # counts 0: 3000 stays
    assert await usage(api, the.trial) == ("3000", 2)
    await the.alice.call("DELETE", "/api/v1/checkpoints", {"checkpointUuids": [ckpt_uuid(1)]})
    assert await usage(api, the.trial) == ("0", 1)
    await report(the, ckpt_uuid(3), 3900)
    assert await usage(api, the.trial) == ("3900", 2)
    exp = (await api.call("GET", f"/api/v1/experiments/{the.trial}"))["experiment"]
    assert exp["state"] == "STATE_ACTIVE"


async def test_per_user_quota(api: Api) -> None:
    """6000 bytes for all of alice's experiments together: her second experiment's report
    over it is refused naming her and the per-user key; bob's own usage is his."""
    the = await lab(api)
    await report(the, ckpt_uuid(1), 3500)
    second = (await create(the.alice, SECOND))["experiment"]["id"]
    alloc, token = await allocate(api, second, "agent-z")
    task_id = (await the.alice.call("GET", f"/api/v1/trials/{second}"))["trial"]["taskId"]
    refused = await the.alice.call(
        "POST", "/api/v1/checkpoints", body(the, ckpt_uuid(2), 3000, task_id=task_id,
                                            alloc_id=alloc.id),
        status=429, headers=the.task(token))
    for part in ("the experiments of user alice would use 6.3 KiB",
                 "over the quota of 5.9 KiB per user", "checkpoint_storage_quota_per_user",
                 "they hold 3.4 KiB in 1 experiment(s)", "dettui checkpoint delete"):
        assert part in refused["message"], (part, refused["message"])
    await the.alice.call("POST", "/api/v1/checkpoints",
                         body(the, ckpt_uuid(3), 2000, task_id=task_id, alloc_id=alloc.id),
                         headers=the.task(token))  # within both quotas
    await the.bob.call("POST", "/api/v1/checkpoints",
                       {**body(the, ckpt_uuid(4), 3900), "taskId": await _task(the, the.bob_trial),
                        "allocationId": None}, headers=the.task(the.bob_token))
    assert await usage(api, the.bob_trial) == ("3900", 1)


async def _task(the: Lab, trial_id: int) -> str:
    return str((await the.bob.call("GET", f"/api/v1/trials/{trial_id}"))["trial"]["taskId"])


SECOND = """
name: second
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
hyperparameters: {lr: 0.1}
"""


async def test_two_reports_at_once_cannot_both_slip_under(api: Api) -> None:
    """Two trials' reports at the same moment: the check and the insert are one transaction,
    so 3000 + 3000 bytes under a 4000-byte quota keeps exactly one."""
    the = await lab(api)
    answers = await asyncio.gather(*(
        the.alice.client.post("/api/v1/checkpoints", json=body(the, ckpt_uuid(n), 3000),
                              headers=the.task(the.token)) for n in (1, 2)))
    assert sorted(r.status for r in answers) == [200, 429]
    assert await usage(api, the.trial) == ("3000", 1)


def test_master_config_quota(tmp_path: Path) -> None:
    """checkpoint_storage_quota(_per_user) in the master config: sizes with units, or bytes;
    anything else named with its key."""
    path = tmp_path / "master.yaml"
    path.write_text("checkpoint_storage_quota: 50GiB\ncheckpoint_storage_quota_per_user: 2TB\n")
    kw = settings_from(load_master_config(path))
    assert kw["checkpoint_quota"] == 50 * 2**30
    assert kw["checkpoint_quota_per_user"] == 2 * 10**12
    path.write_text("checkpoint_storage_quota: lots\ncheckpoint_storage_quota_per_user: 0\n")
    with pytest.raises(ConfigError) as err:
        load_master_config(path)
    assert "checkpoint_storage_quota: " in str(err.value) and "50GiB" in str(err.value)
    assert "checkpoint_storage_quota_per_user: " in str(err.value)
    assert settings_from(load_master_config(_write(path, "{}")))["checkpoint_quota"] is None


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "size"), [
    ("50GiB", 50 * 2**30), ("50 gib", 50 * 2**30), ("1.5TB", 1_500_000_000_000),
    ("500M", 500 * 2**20), ("4096", 4096), ("1KB", 1000)])
def test_sizes(text: str, size: int) -> None:
    assert byte_size.parse(text) == size


@pytest.mark.parametrize("text", ["", "x", "-5", "1e9", "5 GiBs", "99999999999999999PiB"])
def test_sizes_refused(text: str) -> None:
    with pytest.raises(ValueError):
        byte_size.parse(text)


async def test_migration_27_counts_what_the_reports_count(api: Api, backend: str) -> None:
    """The migration's backfill (run again on usage set to 0) finds what the reports kept:
    the bytes and number of the checkpoints that hold files, plain decimal sizes only."""
    the = await lab(api)
    await report(the, ckpt_uuid(1), 1000, "-5", "x")
    await report(the, ckpt_uuid(2), 2500)
    await report(the, ckpt_uuid(3), 10)
    await the.alice.call("DELETE", "/api/v1/checkpoints", {"checkpointUuids": [ckpt_uuid(3)]})
    kept = await usage(api, the.trial)
    assert kept == ("3500", 2)
    folder = Path(dbmod.__file__).parent / "migrations"
    sql = (folder / ("postgres/" if backend == "postgres" else "") / "0027_checkpoint_usage.sql"
           ).read_text()
    backfill = next(s for s in dbmod._split(sql) if s.startswith("UPDATE"))

    def again(conn: Any) -> None:
        conn.execute("UPDATE experiments SET checkpoint_size=0, checkpoint_count=0")
        conn.execute(backfill)

    await api.client.server.app[appkeys.DB].run(again)
    assert await usage(api, the.trial) == kept
    assert await usage(api, the.bob_trial) == ("0", 0)
