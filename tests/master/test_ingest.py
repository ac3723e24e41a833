"""Metric ingest: the Core API's client coalesces what it has queued into batch requests and
makes the training loop wait when its bounded queue is full; the master commits reports in
groups, each acknowledged only once committed, a refused one leaving the others in."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from dettui.core import _train
from dettui.core._info import ClusterInfo, TrialInfo
from dettui.core._session import Session
from dettui.errors import InvalidArgument
from dettui.master.http import appkeys
from tests.master.conftest import Api, allocate
from tests.master.test_api import create


async def _trial_context(api: Api, run_id: int | None = None) -> _train.TrainContext:
    await create(api)
    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    trial = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={},
                      steps_completed=0, trial_run_id=run_id or alloc.run_id)
    url = str(api.client.make_url("")).rstrip("/")
    info = ClusterInfo(master_url=url, cluster_id="", agent_id="agent-x", slot_ids=[0],
                       task_id="", allocation_id=alloc.id, session_token=alloc_token,
                       task_type="TRIAL", latest_checkpoint=None, trial=trial)
    return _train.TrainContext(Session(url, task_token=alloc_token), info)


async def _steps(api: Api) -> list[int]:
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    return sorted(m["stepsCompleted"] for m in rows)


async def test_a_loop_reporting_every_step_is_sent_in_batches(api: Api) -> None:
    train = await _trial_context(api)

    def loop() -> None:
        for step in range(1, 3001):
            train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
            if step % 100 == 0:
                train.report_progress(step / 3000)
        train.close()

    await asyncio.to_thread(loop)
    assert await _steps(api) == list(range(1, 3001))
    groups = api.client.server.app[appkeys.INGEST].groups
    assert groups < 3000 / 5, f"{groups} commits for 3000 reports: the client did not coalesce"
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert trial["totalBatchesProcessed"] == 3000


async def test_a_full_queue_makes_the_loop_wait(api: Api,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_train, "QUEUE_LIMIT", 10)
    monkeypatch.setattr(_train, "BATCH_LIMIT", 10)
    train = await _trial_context(api)
    db = api.client.server.app[appkeys.DB]
    stall = asyncio.ensure_future(db.call(time.sleep, 1.5))  # the master's store is busy
    await asyncio.sleep(0.1)

    def loop() -> float:
        started = time.monotonic()
        for step in range(1, 101):
            train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0})
        return time.monotonic() - started

    waited = await asyncio.to_thread(loop)
    await stall
    await asyncio.to_thread(train.close)
    assert waited > 1.0, f"100 reports into a queue of 10 took only {waited:.2f} s"
    assert await _steps(api) == list(range(1, 101))


async def test_a_refused_report_is_raised_and_the_others_are_kept(api: Api) -> None:
    train = await _trial_context(api, run_id=7)  # a stale run: the master refuses it
    ok = await api.call("POST", "/api/v1/trials/1/metrics/batch", {"reports": [
        {"group": "training", "metrics": {"trialId": 1, "trialRunId": run, "stepsCompleted": s,
                                          "metrics": {"avgMetrics": {"loss": 1.0}}}}
        for run, s in ((1, 1), (7, 2), (1, 3))]},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {train._info.session_token}"})
    assert ok == {"refused": [{"index": 1, "message":
                               "invalid run id, 7 (reported) != 1 (expected)"}]}
    assert await _steps(api) == [1, 3]

    def loop() -> Any:
        train.report_training_metrics(steps_completed=5, metrics={"loss": 1.0})
        train.report_training_metrics(steps_completed=6, metrics={"loss": 1.0})
        train.close()

    with pytest.raises(InvalidArgument, match="invalid run id, 7"):
        await asyncio.to_thread(loop)


async def test_concurrent_reports_of_many_trials_share_commits(api: Api) -> None:
    """Reports from several trials arriving together are committed in fewer transactions than
    reports, and every one is acknowledged only once stored."""
    for _ in range(4):
        await create(api)
    tokens = {}
    for trial_id in range(1, 5):
        alloc, alloc_token = await allocate(api, trial_id, "agent-x", [0])
        tokens[trial_id] = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}

    async def report(trial_id: int, step: int) -> None:
        await api.call("POST", f"/api/v1/trials/{trial_id}/metrics", {
            "group": "training", "metrics": {"trialId": trial_id, "trialRunId": 1,
                                             "stepsCompleted": step,
                                             "metrics": {"avgMetrics": {"loss": 1.0}}}},
            headers=tokens[trial_id])

    ingest = api.client.server.app[appkeys.INGEST]
    before = ingest.groups
    await asyncio.gather(*(report(t, s) for s in range(1, 51) for t in range(1, 5)))
    assert ingest.groups - before < 200
    for trial_id in range(1, 5):
        rows = (await api.call("GET", f"/api/v1/trials/{trial_id}/metrics"))["metrics"]
        assert sorted(m["stepsCompleted"] for m in rows) == list(range(1, 51))
