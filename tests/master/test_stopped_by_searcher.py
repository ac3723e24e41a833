"""The trial view says which trials the searcher stopped early (`stoppedBySearcher`): those
ASHA did not promote to the next rung; not the trial that ran the search's full length, nor
one that never was stopped. The dashboard's trials table marks them."""

from __future__ import annotations

from typing import Any

from dettui.master.http import appkeys
from dettui.master.store import trials as trial_store
from tests.master.conftest import Api, allocate
from tests.master.test_api import create

ASHA = """
name: asha
entrypoint: python3 train.py
searcher: {name: adaptive_asha, metric: loss, smaller_is_better: true, max_trials: 4,
           max_time: 16, time_metric: batches, divisor: 4, max_rungs: 2, mode: aggressive,
           max_concurrent_trials: 4}
hyperparameters: {lr: {type: double, minval: 0.001, maxval: 0.1}}
"""


async def _validate(api: Api, trial_id: int, steps: int, loss: float) -> None:
    """A validation report at `steps` from the trial's allocation (made on its first)."""
    tokens: dict[int, str] = api.__dict__.setdefault("tokens", {})
    if trial_id not in tokens:
        tokens[trial_id] = (await allocate(api, trial_id))[1]
    token = tokens[trial_id]
    await api.call("POST", f"/api/v1/trials/{trial_id}/metrics", {
        "group": "validation", "metrics": {
            "trialId": trial_id, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"loss": loss, "batches": steps}}}},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})


async def _trials(api: Api, exp_id: int) -> dict[int, dict[str, Any]]:
    got = await api.call("GET", f"/api/v1/experiments/{exp_id}/trials")
    return {t["id"]: t for t in got["trials"]}


async def test_trials_asha_stopped_early_are_marked(api: Api) -> None:
    exp = (await create(api, ASHA))["experiment"]
    trials = await _trials(api, exp["id"])
    assert len(trials) == 4 and not any(t["stoppedBySearcher"] for t in trials.values())
    ids = sorted(trials)
    for i, trial_id in enumerate(ids):
        await _validate(api, trial_id, 4, 0.1 * (i + 1))
    trials = await _trials(api, exp["id"])  # ASHA keeps the best quarter: trial 1
    assert [trials[i]["stoppedBySearcher"] for i in ids] == [False, True, True, True]
    await _validate(api, ids[0], 16, 0.05)  # the full length: closed, but not early
    db = api.client.server.app[appkeys.DB]
    assert (await db.read(trial_store.get, ids[0])).searcher_stopped
    trials = await _trials(api, exp["id"])
    assert [trials[i]["stoppedBySearcher"] for i in ids] == [False, True, True, True]
    one = await api.call("GET", f"/api/v1/trials/{ids[1]}")
    assert one["trial"]["stoppedBySearcher"] is True
