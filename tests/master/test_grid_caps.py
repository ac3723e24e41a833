"""`POST /api/v1/preview-hp-search` and experiment intake (validateOnly too) refuse the
attacker's grids with a quick 400 naming the grid's size: points x hyperparameters over the
cap (1.4 GB and 13 s before), every trial at once (minutes), a size of thousands of digits (a
500). A small grid still creates its trials in Determined's order."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
import yaml

from tests.master.conftest import Api

NO_HANG = 20.0  # seconds; generous, the first took 13 s and the second minutes before
FILES = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode(),
          "mtime": "1700000000", "mode": 33188, "uid": 0, "gid": 0}]


def _config(hps: str, searcher: str = "") -> str:
    return ("name: g\nentrypoint: python3 train.py\n"
            f"searcher: {{name: grid, metric: loss, max_length: {{batches: 10}}{searcher}}}\n"
            "hyperparameters:\n" + hps)


def _cells() -> str:
    vals = ", ".join(str(i) for i in range(25_000))  # x 401 just over the 10M cap
    return (f"  c: {{type: categorical, vals: [{vals}]}}\n"
            + "".join(f"  k{i}: 0\n" for i in range(400)))


HOSTILE = [
    (_cells(), "", "25,000 points of 401 hyperparameters"),
    ("  a: {type: int, minval: 0, maxval: 100000, count: 30000}\n",
     ", max_concurrent_trials: 0", "set max_concurrent_trials from 1 to 1000"),
    ("".join(f"  h{i}: {{type: double, minval: 0, maxval: 1, count: {10**18}}}\n"
             for i in range(240)), "", "about 10^4320 points"),
]


async def _create(api: Api, config: str, *, validate_only: bool = False,
                  status: int = 200) -> Any:
    body: dict[str, Any] = {"config": config, "modelDefinition": FILES, "activate": True}
    if validate_only:
        body["validateOnly"] = True
    return await api.call("POST", "/api/v1/experiments", body, status=status)


@pytest.mark.parametrize(("hps", "searcher", "says"), HOSTILE,
                         ids=["cells", "all-at-once", "digits"])
async def test_the_attackers_grids_are_refused_quickly(api: Api, hps: str, searcher: str,
                                                         says: str) -> None:
    config = _config(hps, searcher)
    start = time.monotonic()
    for validate_only in (True, False):
        got = await _create(api, config, validate_only=validate_only, status=400)
        assert says in str(got)
    got = await api.call("POST", "/api/v1/preview-hp-search", {"config": yaml.safe_load(config)},
                         status=400)
    assert says in str(got)
    assert time.monotonic() - start < NO_HANG
    assert (await api.call("GET", "/api/v1/experiments"))["experiments"] == []


async def test_a_small_grid_still_previews_and_creates_its_trials_in_order(api: Api) -> None:
    config = _config("  lr: {type: categorical, vals: [0.1, 0.2, 0.3]}\n"
                     "  width: {type: int, minval: 1, maxval: 2, count: 2}\n  k: 7\n",
                     ", max_concurrent_trials: 0")
    got = await api.call("POST", "/api/v1/preview-hp-search",
                         {"config": yaml.safe_load(config)})
    assert sum(t["count"] for t in got["summary"]["trials"]) == 6
    exp = (await _create(api, config))["experiment"]
    assert exp["numTrials"] == 6
    trials = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"]
    assert sorted((t["id"], t["hparams"]["lr"], t["hparams"]["width"], t["hparams"]["k"])
                  for t in trials) == [(i + 1, lr, w, 7) for i, (lr, w) in enumerate(
                      (lr, w) for lr in (0.1, 0.2, 0.3) for w in (1, 2))]
