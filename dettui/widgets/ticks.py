"""The metric chart's y axis: round ticks at one step (0.2, 0.4, 0.6), each on a row of the
chart and the same number of rows apart, rather than plotext's own labels (0.690, 0.606,
0.438: some of its rows' values left out, so the steps looked uneven). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

NICE = (1.0, 2.0, 5.0)  # a step is one of these times a power of ten
MAX_STEPS = 60  # round steps tried, from the finest that could fit upwards
TINY = 1e-300  # a step below this is not a round number a float can hold


@dataclass(frozen=True)
class Axis:
    """An axis from `low` to `high` (the chart's bottom and top rows) and its ticks."""

    low: float
    high: float
    ticks: list[float]
    labels: list[str]


def axis(low: float, high: float, rows: int) -> Axis:
    """The axis for data from `low` to `high` on a chart `rows` text rows tall: its bottom a
    multiple of a round step (1, 2 or 5 times a power of ten), a tick every `k` rows at that
    step, and the step and `k` those that leave the data the most of the chart (with at least
    3 ticks where the chart has the rows, a label on every row only on a short chart, ticks
    about 3 rows apart). A flat series gets a range around its value; bounds too far apart
    for any step are the axis."""
    low, high = min(low, high), max(low, high)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("an axis needs finite bounds")
    if high == low:
        spread = abs(low) / 10 or 1.0
        low, high = low - spread, high + spread
    gaps = max(rows - 1, 1)
    if high - low == math.inf or (high - low) / gaps < TINY:
        # ±1e308 (no room for a round step) or 5e-324 apart (no step is a normal float)
        return Axis(low, high, [low, high], [f"{low:.3g}", f"{high:.3g}"])
    best: tuple[tuple[bool, float], Axis] | None = None
    step = _step((high - low) / gaps)
    for _ in range(MAX_STEPS):
        if not math.isfinite(step * gaps * 10):
            break
        bottom = math.floor(low / step + 1e-9) * step
        k = math.floor(step * gaps / (high - bottom) + 1e-9)  # rows per step that still fit
        if k >= 1:
            top = bottom + step * gaps / k
            ticks = [round(bottom + i * step, _decimals(step) + 1) + 0.0  # never -0.0
                     for i in range(gaps // k + 1)]
            fill = (high - low) / (top - bottom)
            crowded = 0.25 if k == 1 and gaps >= 4 else 0.0  # a label on every row
            rank = (len(ticks) >= min(3, rows), fill - crowded - 0.05 * abs(k - 3))
            if best is None or rank > best[0]:
                best = (rank, Axis(bottom, top, ticks, _labels(ticks, step)))
            if len(ticks) <= 2:  # coarser steps only leave more of the chart empty
                break
        step = _step(step * 1.000001)
    if best is None:  # no step fits in MAX_STEPS (cannot happen with finite bounds)
        return Axis(low, high, [low, high], [f"{low:.3g}", f"{high:.3g}"])
    return best[1]


def _labels(values: list[float], step: float) -> list[str]:
    """The ticks' labels, with the decimals the step needs (`0.2`, `0.55335`); very small or
    big ones as `1.5e-06`, `5e+06` rather than 0.0000015, 5000000."""
    biggest = max(abs(v) for v in values)
    if biggest == 0:
        return ["0" for _ in values]
    if biggest >= 1e6 or biggest < 1e-3:
        digits = math.floor(math.log10(biggest)) - math.floor(math.log10(step) + 1e-9) + 1
        return [f"{v:.{max(digits, 1)}g}" for v in values]
    return [f"{v:.{_decimals(step)}f}" for v in values]


def _decimals(step: float) -> int:
    """Decimals that tell ticks `step` apart: 1 for 0.2, 0 for 5."""
    return max(0, -math.floor(math.log10(step) + 1e-9))


def _step(rough: float) -> float:
    """The smallest round step at least `rough`."""
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (*NICE, 10.0) if m * power >= rough * (1 - 1e-9))
