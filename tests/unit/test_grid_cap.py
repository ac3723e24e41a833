"""A grid search's size is capped and counted without building it (3000x3000 took 10.6 s)."""

from __future__ import annotations

import time

import pytest

from dettui.config import load_config
from dettui.config.hyperparameters import MAX_GRID, grid, grid_size, normalize
from dettui.errors import ConfigError

BASE = "name: g\nentrypoint: x\nsearcher: {name: grid, metric: m}\nhyperparameters:\n"


def test_a_huge_grid_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError, match="9,000,000 points, over the limit of 100,000"):
        load_config(BASE + "  a: {type: int, minval: 0, maxval: 5000, count: 3000}\n"
                           "  b: {type: double, minval: 0, maxval: 1, count: 3000}\n")
    with pytest.raises(ConfigError, match="about 10\\^"):
        load_config(BASE + "  a: {type: double, minval: 0, maxval: 1, count: 1000000000}\n"
                           "  b: {type: double, minval: 0, maxval: 1, count: 1000000000}\n")
    assert time.monotonic() - started < 1.0


def test_grid_size_is_the_number_of_points() -> None:
    hps = normalize({"a": {"type": "int", "minval": 1, "maxval": 3, "count": 10},
                     "g": {"b": {"type": "categorical", "vals": [1, 2]},
                           "c": {"type": "log", "minval": -3, "maxval": -1, "count": 3}},
                     "d": 5})
    assert grid_size(hps) == len(grid(hps)) == 3 * 2 * 3
    ok = BASE + f"  a: {{type: int, minval: 0, maxval: 100000, count: {MAX_GRID}}}\n"
    assert load_config(ok).searcher.name == "grid"
