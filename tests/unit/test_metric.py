"""The searcher metric's rules, stated once in `dettui.metric` and used by every reader."""

from __future__ import annotations

import math

import pytest

from dettui import metric

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(("metrics", "number"), [
    ({"loss": 0.5}, 0.5), ({"loss": 3}, 3.0), ({"loss": True}, None), ({"loss": "0.5"}, None),
    ({"loss": None}, None), ({}, None), (None, None), ({"loss": INF}, INF),
])
def test_number(metrics: dict | None, number: float | None) -> None:
    assert metric.number(metrics, "loss") == number


def test_nan_is_a_number_that_scores_worst() -> None:
    value = metric.number({"loss": NAN}, "loss")
    assert value is not None and math.isnan(value)
    assert metric.score(value, True) == metric.score(value, False) == INF
    assert metric.score(2.0, True) == 2.0 and metric.score(2.0, False) == -2.0


@pytest.mark.parametrize(("values", "smaller", "best"), [
    ([3.0, 1.0, 2.0], True, 1), ([3.0, 1.0, 2.0], False, 0),
    ([NAN, 5.0], True, 1), ([NAN, 5.0], False, 1),  # NaN is never best
    ([NAN, None], True, None), ([], True, None), ([None, 4.0], True, 1),
    ([1.0, 1.0], True, 0),  # the first of equals
    ([INF, 7.0], False, 0), ([-INF, 7.0], True, 0),
])
def test_best(values: list[float | None], smaller: bool, best: int | None) -> None:
    found = metric.best(list(enumerate(values)), lambda iv: iv[1], smaller)
    assert (None if found is None else found[0]) == best


@pytest.mark.parametrize(("value", "best", "smaller", "improves"), [
    (1.0, 2.0, True, True), (3.0, 2.0, True, False), (3.0, 2.0, False, True),
    (2.0, 2.0, True, False), (2.0, 2.0, False, False),  # an equal is not a new best
    (5.0, None, True, True), (5.0, None, False, True),  # anything beats no best
    (NAN, None, True, False), (NAN, 2.0, True, False), (NAN, 2.0, False, False),  # NaN: never
    (5.0, NAN, True, True),  # a NaN best (an older version's) gives way to any number
    (None, None, True, False), (None, 2.0, True, False),  # a missing value never improves
    (INF, 2.0, True, False), (INF, 2.0, False, True), (-INF, 2.0, True, True),
])
def test_improves(value: float | None, best: float | None, smaller: bool,
                  improves: bool) -> None:
    assert metric.improves(value, best, smaller) is improves


@pytest.mark.parametrize(("metrics", "candidate"), [
    ({"loss": 0.5}, 0.5), ({"loss": NAN}, None), ({"loss": True}, None), ({}, None),
    (None, None), ({"loss": -INF}, -INF),
])
def test_candidate(metrics: dict | None, candidate: float | None) -> None:
    assert metric.candidate(metrics, "loss") == candidate
