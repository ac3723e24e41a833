"""bench/scale.py's sizes from its arguments (the benchmark itself never runs in the tests)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def scale():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("scale")
    finally:
        sys.path.remove(str(BENCH))


def sizes(scale, *argv: str):  # type: ignore[no-untyped-def]
    return scale.sizes_of(scale.parser().parse_args(list(argv)))


def test_full_scale_is_the_issues_sizes(scale) -> None:  # type: ignore[no-untyped-def]
    s = sizes(scale)
    assert (s.agents, s.slots, s.experiments, s.trials) == (100, 8, 10_000, 10)
    assert (s.metric_rows, s.dashboards, s.core_rows) == (10_000_000, 10, 1_000_000)


def test_scale_multiplies_counts_but_not_the_shape(scale) -> None:  # type: ignore[no-untyped-def]
    s = sizes(scale, "--scale", "0.1")
    assert (s.agents, s.experiments, s.metric_rows, s.core_rows) == (10, 1000, 1_000_000, 100_000)
    assert (s.slots, s.trials, s.dashboards) == (8, 10, 10)
    assert s.core_block * 10 == s.core_rows
    tiny = sizes(scale, "--quick")
    assert tiny == sizes(scale, "--scale", "0.05")
    assert tiny.agents >= 4 and tiny.experiments >= 100


def test_a_size_given_on_its_own_wins(scale) -> None:  # type: ignore[no-untyped-def]
    assert sizes(scale, "--scale", "0.1", "--experiments", "7").experiments == 7


@pytest.mark.parametrize("factor", ["0", "-1", "1.5"])
def test_scale_out_of_range_is_refused(scale, factor: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="--scale"):
        sizes(scale, "--scale", factor)
