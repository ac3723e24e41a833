"""`POST /api/v1/preview-hp-search` and experiment intake refuse a searcher whose plan would be
huge (it once grew the master to 15 GB and never answered), quickly and with a 400 naming the
keys; Determined's tutorial adaptive searches still preview and create."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
import yaml

from tests.master.conftest import Api

HOSTILE = {"entrypoint": "python3 x.py", "hyperparameters": {},
           "searcher": {"name": "adaptive_asha", "metric": "loss", "time_metric": "batches",
                        "max_time": 10**18, "max_trials": 2**62, "max_rungs": 1_000_000_000,
                        "divisor": 1.0000001}}
MNIST_ADAPTIVE = """
name: mnist_pytorch_adaptive_search
hyperparameters:
  learning_rate: {type: double, minval: .0001, maxval: 1.0}
  n_filters1: {type: int, minval: 8, maxval: 64}
  dropout1: {type: double, minval: .2, maxval: .8}
searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_trials: 16
  time_metric: batches
  max_time: 937
entrypoint: python3 train.py --epochs 1
"""
CORE_API_HPSEARCH = """
name: core-api-stage-3
entrypoint: python3 3_hpsearch.py
hyperparameters:
  increment_by: {type: int, minval: 1, maxval: 8}
searcher:
   name: adaptive_asha
   metric: x
   max_trials: 10
   time_metric: batches
   max_time: 100
max_restarts: 0
"""


async def create(api: Api, config: str, status: int = 200) -> Any:
    script = str(yaml.safe_load(config)["entrypoint"]).split()[1]
    content = base64.b64encode(b"print('hi')\n").decode()
    files = [{"path": script, "type": 48, "content": content, "mtime": "1700000000",
              "mode": 33188, "uid": 0, "gid": 0}]
    return await api.call("POST", "/api/v1/experiments",
                          {"config": config, "modelDefinition": files, "activate": False},
                          status=status)


async def test_the_attackers_preview_is_refused_quickly(api: Api) -> None:
    start = time.monotonic()
    got = await api.call("POST", "/api/v1/preview-hp-search", {"config": HOSTILE}, status=400)
    assert time.monotonic() - start < 10  # a no-hang bound: it ran for minutes before
    assert "max_rungs 1000000000" in str(got) and "at most 64" in str(got)


async def test_the_attackers_experiment_is_refused_at_intake(api: Api) -> None:
    got = await create(api, yaml.safe_dump(HOSTILE), status=400)
    assert "max_rungs" in str(got)
    assert (await api.call("GET", "/api/v1/experiments"))["experiments"] == []


@pytest.mark.parametrize("config", [MNIST_ADAPTIVE, CORE_API_HPSEARCH])
async def test_determineds_tutorial_adaptive_searches_preview_and_create(
        api: Api, config: str) -> None:
    parsed = yaml.safe_load(config)
    got = await api.call("POST", "/api/v1/preview-hp-search", {"config": parsed})
    trials = got["summary"]["trials"]
    assert sum(t["count"] for t in trials) == parsed["searcher"]["max_trials"]
    made = await create(api, config)
    assert made["experiment"]["id"] >= 1
