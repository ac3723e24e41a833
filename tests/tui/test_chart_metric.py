"""The experiment screen's header names the metric its chart shows (issue 31, smaller list):
after `m` (next metric) then `g` (training/validation), the header named the chosen validation
metric while the chart, which has no such training metric, drew the training group's first."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from dettui.screens.experiment import ExperimentScreen
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard

SIZE = (120, 36)
GROUPS = {"validation": {"validation_loss": [0.6, 0.4], "validation_accuracy": [0.7, 0.8]},
          "training": {"loss": [0.9, 0.5]}}


class TwoGroups(FixedClient):
    """Validation reports two metrics; training reports another one."""

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        return {"series": [{"name": name, "steps": [100, 200], "values": values}
                           for name, values in GROUPS[group].items()], "lastSteps": 200}


def header(app: FixedDashboard) -> str:
    return str(app.screen.query_one("#title").render())


def chart_title(app: FixedDashboard) -> str:
    return str(app.screen.query_one("#chart-title").render())


async def agree(app: FixedDashboard, metric: str, group: str) -> None:
    """The chart shows `metric` of `group`, and the header says so."""
    await until_async(lambda: chart_title(app) == f"trial 1: {metric} ({group})",
                      f"the chart of {metric} ({group})", timeout=15)
    assert f"metric {metric} ({group})" in header(app), (header(app), chart_title(app))


async def press(pilot: Pilot[None], key: str) -> None:
    await pilot.press(key)
    await pilot.pause(0.2)


async def test_after_m_then_g_the_header_names_the_metric_the_chart_shows() -> None:
    app = FixedDashboard(client=TwoGroups)
    async with app.run_test(size=SIZE) as pilot:
        await press(pilot, "2")
        await press(pilot, "enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen), "the experiment")
        await agree(app, "validation_loss", "validation")  # the searcher's metric
        await press(pilot, "m")
        await agree(app, "validation_accuracy", "validation")
        await press(pilot, "g")
        await agree(app, "loss", "training")
        await press(pilot, "g")  # back: the metric chosen is still the one shown
        await agree(app, "validation_accuracy", "validation")
    assert app.errors == []
