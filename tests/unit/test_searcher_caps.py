"""A searcher config whose plan alone would be huge (rungs, brackets, trials started at once)
is refused at validation, naming the keys and the limit; Determined's tutorial searches pass
and their previews come from a few numbers, whatever `max_trials` is."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from dettui.config.loader import load_config
from dettui.config.schema import MAX_RUNGS, MAX_TRIALS_AT_ONCE, Searcher
from dettui.errors import ConfigError
from dettui.master.searcher.asha import AdaptiveASHA, plan
from dettui.master.searcher.basic import RandomSearch
from dettui.master.searcher.preview import simulate

HOSTILE = {"name": "adaptive_asha", "metric": "loss", "time_metric": "batches",
           "max_time": 10**18, "max_trials": 2**62, "max_rungs": 1_000_000_000,
           "divisor": 1.0000001}


def problems(searcher: dict[str, Any]) -> str:
    config = {"entrypoint": "python3 x.py", "searcher": searcher, "hyperparameters": {}}
    with pytest.raises(ConfigError) as err:
        load_config(json.dumps(config), source="config", managed=False)
    return str(err.value)


def test_the_attackers_searcher_is_refused_at_once_naming_keys_and_limit() -> None:
    start = time.monotonic()
    text = problems(HOSTILE)
    assert time.monotonic() - start < 5  # a no-hang bound: it took minutes and 15 GB
    assert "max_rungs 1000000000" in text and "divisor" in text and f"{MAX_RUNGS}" in text


@pytest.mark.parametrize(("change", "words"), [
    ({"bracket_rungs": [1000]}, "searcher.bracket_rungs"),
    ({"bracket_rungs": [2] * 100}, "at most 64"),
    ({"bracket_rungs": [0]}, "from 1 to 64"),
    ({"name": "async_halving", "num_rungs": 10**9, "max_rungs": 5}, "searcher.num_rungs"),
    ({"max_rungs": 5, "divisor": 1e200, "bracket_rungs": [3]}, "divisor"),
    ({"max_rungs": 5, "divisor": float("inf")}, "searcher.divisor"),
    ({"max_rungs": 5, "max_time": 10**30}, "searcher.max_time"),
    ({"max_rungs": 5, "max_trials": 10**30}, "searcher.max_trials"),
    ({"max_rungs": 5, "max_concurrent_trials": 0}, "max_concurrent_trials"),
    ({"max_rungs": 5, "max_concurrent_trials": 10**6}, f"at most {MAX_TRIALS_AT_ONCE}"),
    ({"name": "random", "max_concurrent_trials": 0}, "max_concurrent_trials"),
])
def test_each_way_to_a_huge_plan_is_refused(change: dict[str, Any], words: str) -> None:
    assert words in problems({**HOSTILE, **change})


def test_a_large_max_rungs_that_max_time_limits_stays_valid() -> None:
    """Determined allows any max_rungs: only the rungs the search would really use count."""
    s = Searcher(name="adaptive_asha", metric="m", time_metric="batches", max_time=937,
                 max_trials=16, max_rungs=1_000_000_000)
    assert [r for r, _, _ in plan(s)] == [3, 2]  # standard mode, min(log4 937, log4 16) + 1


def test_huge_max_trials_plans_and_previews_from_a_few_numbers() -> None:
    s = Searcher(name="adaptive_asha", metric="m", time_metric="batches", max_time=10**18,
                 max_trials=2**62, max_rungs=64, divisor=2.0, max_concurrent_trials=16)
    start = time.monotonic()
    rows = simulate(s, {})
    search = AdaptiveASHA(s, {}, 0)
    assert len(search.initial()) <= 64  # concurrency, spread over the brackets
    assert time.monotonic() - start < 5  # a no-hang bound
    assert sum(r["count"] for r in rows) == 2**62
    random = RandomSearch(Searcher(name="random", metric="m", max_trials=2**62), {}, 0)
    assert len(random.initial()) == 16


@pytest.mark.parametrize("searcher", [
    {"name": "adaptive_asha", "metric": "validation_loss", "smaller_is_better": True,
     "max_trials": 16, "time_metric": "batches", "max_time": 937},  # mnist_pytorch/adaptive
    {"name": "adaptive_asha", "metric": "x", "max_trials": 10, "time_metric": "batches",
     "max_time": 100},  # core_api/3_hpsearch
    {"name": "async_halving", "metric": "x", "max_trials": 10, "num_rungs": 3,
     "time_metric": "batches", "max_time": 100},
])
def test_determineds_tutorial_searches_still_preview(searcher: dict[str, Any]) -> None:
    config = {"entrypoint": "python3 x.py", "searcher": searcher, "hyperparameters": {}}
    cfg = load_config(json.dumps(config), source="config", managed=False)
    rows = simulate(cfg.schema.searcher, {})
    assert sum(r["count"] for r in rows) == searcher["max_trials"]
