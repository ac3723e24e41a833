"""The compare charts draw any finite values: a metric near a float's limits (1e308, -1e308,
5e-324) raised OverflowError, "cannot convert float NaN to integer" or "math domain error"
and left the compare screen with no chart (an attack review's finding)."""

from __future__ import annotations

import pytest

from dettui.widgets.plot import Axis, Curve, Dot, overlay, parallel, scatter
from dettui.widgets.ticks import axis

BIG = 1.7976931348623157e308
CASES = [[1e308] * 3, [1e308, -1e308, 0.0], [BIG, -BIG, 1.0], [5e-324, 1e-323, 0.0],
         [0.0, 0.0, 0.0], [-0.0, 0.0, 1e-320], [1e-300, 1e300, 5.0]]


@pytest.mark.parametrize("ys", CASES, ids=[str(c[:2]) for c in CASES])
@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_every_chart_draws_values_at_a_floats_limits(ys: list[float],
                                                     size: tuple[int, int]) -> None:
    width, height = size
    drawn = [overlay([Curve("red", [1, 2, 3], ys)], width, height),
             overlay([Curve("red", [1, 2, 3], ys)], width, height, log_y=True),
             overlay([Curve("red", ys, [1, 2, 3])], width, height),
             scatter([Dot("red", x, y) for x, y in zip(ys, ys, strict=True)], width, height,
                     x_title="h"),
             scatter([Dot("red", x, y) for x, y in zip(ys, ys, strict=True)], width, height,
                     x_title="h", log_x=True),
             parallel([Axis("a"), Axis("b", log=True), Axis("c", categories=("x", "y"))],
                      [("red", [y, abs(y) or 1.0, 1.0]) for y in ys], width, height)]
    for d in drawn:
        assert len(d.rows) == height


def test_an_axis_of_zeros_and_of_subnormal_bounds() -> None:
    assert axis(0.0, 0.0, rows=20).labels
    tiny = axis(5e-324, 1e-323, rows=20)
    assert tiny.low <= 5e-324 and tiny.high >= 1e-323
