"""A grid search is capped by its values as well as its points, by the trials it starts at
once, and counted without huge integers; its points are built one at a time, in the order
Determined's grid gives (the attacker's grids took 1.4 GB, minutes, or a 500)."""

from __future__ import annotations

import itertools
import time

import pytest

from dettui.config import load_config
from dettui.config.hyperparameters import Grid, grid_axis, normalize
from dettui.config.schema import ExperimentSchema
from dettui.errors import ConfigError
from dettui.master.searcher.basic import GridSearch

BASE = "name: g\nentrypoint: x\nsearcher: {name: grid, metric: m%s}\nhyperparameters:\n"
NO_HANG = 10.0  # seconds; each of these took 12 s to minutes, or failed with a 500, before


def _config(hps: str, searcher: str = "") -> str:
    return BASE % searcher + hps


def test_a_grid_of_many_points_times_many_hyperparameters_is_refused() -> None:
    vals = ", ".join(str(i) for i in range(100_000))
    consts = "".join(f"  k{i}: 0\n" for i in range(400))
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"100,000 points of 401 hyperparameters each "
                                          r"\(40,100,000 values\), over the limit of 10,000,000"):
        load_config(_config(f"  c: {{type: categorical, vals: [{vals}]}}\n" + consts))
    assert time.monotonic() - started < NO_HANG


def test_a_grid_starting_every_trial_at_once_is_refused() -> None:
    hps = "  a: {type: int, minval: 0, maxval: 100000, count: 30000}\n"
    with pytest.raises(ConfigError, match="30000 points with max_concurrent_trials 0 would "
                                          "start 30000 trials at once.*from 1 to 1000"):
        load_config(_config(hps, ", max_concurrent_trials: 0"))
    assert load_config(_config(hps, ", max_concurrent_trials: 1000")).searcher.name == "grid"
    small = "  a: {type: int, minval: 0, maxval: 100, count: 20}\n"
    assert load_config(_config(small, ", max_concurrent_trials: 0")).searcher.name == "grid"


def test_a_grid_whose_size_has_thousands_of_digits_is_refused_with_its_power() -> None:
    hps = "".join(f"  h{i}: {{type: double, minval: 0, maxval: 1, count: {10**18}}}\n"
                  for i in range(240))
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"about 10\^4320 points, over the limit of 100,000"):
        load_config(_config(hps))
    assert time.monotonic() - started < NO_HANG


def test_points_built_on_demand_are_determineds_grid_in_order() -> None:
    hps = normalize({"a": {"type": "int", "minval": 1, "maxval": 3, "count": 10},
                     "g": {"b": {"type": "categorical", "vals": ["x", "y"]},
                           "c": {"type": "log", "minval": -3, "maxval": -1, "count": 3}},
                     "d": 5, "e": {"type": "double", "minval": 0, "maxval": 1, "count": 2}})
    axes = [grid_axis(spec) for spec in (hps["a"], hps["d"], hps["e"], hps["g"]["b"],
                                         hps["g"]["c"])]
    expected = [{"a": a, "d": d, "e": e, "g": {"b": b, "c": c}}
                for a, d, e, b, c in itertools.product(*axes)]
    points = Grid(hps)
    assert len(points) == 3 * 2 * 2 * 3 == len(expected)
    assert [points.point(i) for i in range(len(points))] == expected
    with pytest.raises(IndexError):
        points.point(len(points))


def test_a_grid_search_creates_every_point_once_at_most_its_concurrency_at_a_time() -> None:
    conf = ExperimentSchema.model_validate({
        "searcher": {"name": "grid", "metric": "m", "max_concurrent_trials": 1000},
        "hyperparameters": {"a": {"type": "int", "minval": 0, "maxval": 99999,
                                  "count": 100_000}}})
    search = GridSearch(conf.searcher, normalize(conf.hyperparameters), seed=1)
    started = time.monotonic()
    first = search.initial()
    assert time.monotonic() - started < NO_HANG  # counting open trials once per call
    assert [a.hparams["a"] for a in first] == list(range(1000))
    more = search.exited(first[0].request_id)
    assert [a.hparams["a"] for a in more] == [1000]
