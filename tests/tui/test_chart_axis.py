"""The experiment screen's chart reads in round, evenly spaced y ticks (review 31, N14): in an
80x24 terminal plotext labelled the loss curve 0.690, 0.606, 0.438, 0.354, 0.187 (values of
its rows, some left out). The ticks are round numbers at one step, on rows equally apart."""

from __future__ import annotations

from typing import Any

import pytest
from textual_plotext import PlotextPlot

from dettui.screens.experiment import ExperimentScreen
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard

LOSS = [0.690, 0.61, 0.52, 0.44, 0.35, 0.27, 0.187]


class Curve(FixedClient):
    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        return {"series": [{"name": "validation_loss", "steps": [100 * (i + 1) for i in
                                                                 range(len(LOSS))],
                            "values": LOSS}], "lastSteps": 100 * len(LOSS)}


def _y_ticks(chart: PlotextPlot) -> list[tuple[int, float]]:
    """(row, value) of each labelled row of the chart as drawn."""
    lines = ["".join(seg.text for seg in chart.render_line(y)) for y in range(chart.size.height)]
    return [(row, float(line.split("┤", 1)[0])) for row, line in enumerate(lines)
            if "┤" in line and line.split("┤", 1)[0].strip()]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_y_ticks_are_round_and_evenly_spaced(size: tuple[int, int]) -> None:
    app = FixedDashboard(client=Curve)
    async with app.run_test(size=size) as pilot:
        await pilot.press("2")
        await pilot.press("enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen), "the experiment")
        chart = app.screen.query_one("#chart", PlotextPlot)
        ticks = await until_async(lambda: _y_ticks(chart), "the chart's y ticks",
                                  done=lambda t: len(t) >= 3)
        _check(ticks)
        await pilot.resize_terminal(size[0], size[1] + 7)  # taller: laid out for its new rows
        await until_async(lambda: _y_ticks(chart), "the ticks on the taller chart",
                          done=lambda t: len(t) >= 3 and _even(t))
    assert app.errors == []


def _even(ticks: list[tuple[int, float]]) -> bool:
    try:
        _check(ticks)
    except AssertionError:
        return False
    return True


def _check(ticks: list[tuple[int, float]]) -> None:
    """Round ticks at one step, on rows equally apart, covering the curve."""
    rows = [r for r, _ in ticks]
    values = [v for _, v in ticks]
    assert len({b - a for a, b in zip(rows, rows[1:], strict=False)}) == 1, ticks
    steps = {round(a - b, 9) for a, b in zip(values, values[1:], strict=False)}
    assert len(steps) == 1, ticks
    step = steps.pop()
    assert any(abs(step - m * 10 ** e) < 1e-9 for m in (1, 2, 5) for e in range(-3, 3))
    assert all(abs(v / step - round(v / step)) < 1e-6 for v in values), ticks
    assert min(values) <= min(LOSS) + step and max(values) >= max(LOSS) - step, ticks
