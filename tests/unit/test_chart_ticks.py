"""The metric chart's y axis (review 31, N14): round ticks at one step (0.2, 0.4, 0.6) that
cover the data, each on a row of the chart and the same number of rows apart; never plotext's
row labels at uneven steps (0.690, 0.606, 0.438)."""

from __future__ import annotations

import math
import random

import pytest

from dettui.widgets.ticks import Axis, axis


def _even(a: Axis, rows: int) -> None:
    """The ticks' steps are one round step, the data's span fits, ticks fall on rows."""
    ticks = a.ticks
    assert len(set(a.labels)) == len(a.labels), a  # no two read the same
    if len(ticks) < 2:
        return
    step = ticks[1] - ticks[0]
    steps = [b - t for t, b in zip(ticks, ticks[1:], strict=False)]
    assert max(steps) - min(steps) <= step * 1e-6, a
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-6, a
    per_row = (a.high - a.low) / (rows - 1)
    k = step / per_row  # rows between two ticks: a whole number
    assert abs(k - round(k)) < 1e-6 and round(k) >= 1, (a, rows, k)
    assert abs(ticks[0] - a.low) <= step * 1e-6, a  # the bottom row is a tick


def test_the_reviewers_loss_curve_reads_in_round_equal_steps() -> None:
    a = axis(0.187, 0.690, rows=8)
    assert a.labels == ["0.0", "0.2", "0.4", "0.6"] and a.high >= 0.69
    _even(a, 8)


@pytest.mark.parametrize(("low", "high"), [(0.5533, 0.5534), (-3.2, 7.9), (5, 5), (0, 0),
                                           (1e-6, 3e-6), (12345, 9876543), (-1, -1),
                                           (1e-30, 3e-30), (-1e300, 1e300), (0.0013, 0.55)])
@pytest.mark.parametrize("rows", [3, 6, 8, 20])
def test_the_axis_covers_the_data_at_one_round_step(low: float, high: float,
                                                    rows: int) -> None:
    a = axis(low, high, rows)
    assert a.low <= low and a.high >= high and len(a.ticks) >= 2, a
    _even(a, rows)


def test_random_ranges_always_get_even_ticks() -> None:
    rng = random.Random(14)
    for _ in range(3000):
        scale = 10 ** rng.uniform(-8, 8)
        low = rng.uniform(-1, 1) * scale
        high = low + rng.uniform(0, 2) * scale
        rows = rng.randint(3, 40)
        a = axis(low, high, rows)
        slack = (abs(low) + abs(high)) * 1e-9
        assert a.low <= low + slack and a.high >= high - slack, (low, high, rows, a)
        assert a.ticks[-1] <= a.high + slack, a
        _even(a, rows)


def test_bounds_too_far_apart_for_a_step_are_the_axis() -> None:
    a = axis(-1.7e308, 1.7e308, rows=6)
    assert a.labels == ["-1.7e+308", "1.7e+308"]
    with pytest.raises(ValueError, match="finite"):
        axis(0, math.inf, rows=6)
