"""The dashboard's keys with fixed data (tests/tui/fixed.py; the screens are the real ones):
the experiment's header follows `p` and `a`; `1`/`2` go back to their section's list from any
depth; `c` only asks (and says checkpoints are kept); toasts stay with their section; and the
chart says when a trial has no metrics, or when they could not be read (issue 12)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual_plotext import PlotextPlot

from dettui.errors import DettuiError
from dettui.screens.dialogs import ConfirmScreen
from dettui.screens.experiment import ExperimentScreen
from dettui.screens.experiments import ExperimentsScreen
from dettui.screens.logs import LogsScreen
from dettui.screens.queue import QueueScreen
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard, NoMetrics

SIZE = (120, 36)


async def press(pilot: Pilot[None], *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await pilot.pause(0.2)


def on(app: FixedDashboard, screen: type) -> Callable[[], bool]:
    return lambda: isinstance(app.screen, screen)


def title(app: FixedDashboard) -> str:
    return str(app.screen.query_one("#title").render())


def toasts(app: FixedDashboard) -> list[str]:
    return [str(n.message) for n in app._notifications]


def actions(app: FixedDashboard) -> list[tuple[Any, ...]]:
    return app.client.actions  # type: ignore[union-attr]


class Stateful(FixedClient):
    """Experiment 1's state follows pause and activate (and nothing else tells the screen:
    the fixed feed sends one snapshot and no more)."""

    def __init__(self, agents: list[dict[str, Any]] | None = None) -> None:
        super().__init__(agents)
        self.state = "STATE_ACTIVE"

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return {**await super().experiment(exp_id), "state": self.state}

    async def experiment_action(self, exp_id: int, action: str) -> None:
        await super().experiment_action(exp_id, action)
        self.state = {"pause": "STATE_PAUSED", "activate": "STATE_ACTIVE"}.get(action,
                                                                               self.state)


async def test_pause_and_activate_turn_the_experiment_screens_header() -> None:
    app = FixedDashboard(client=Stateful)
    async with app.run_test(size=SIZE) as pilot:
        await press(pilot, "2", "enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen)
                    and ": ACTIVE, 40% done" in title(app), "experiment 1, active", timeout=15)
        await press(pilot, "p")
        await until_async(lambda: ": PAUSED, 40% done" in title(app), "the header says PAUSED",
                          timeout=15)
        assert actions(app) == [(1, "pause")]
        await press(pilot, "a")
        await until_async(lambda: ": ACTIVE, 40% done" in title(app), "the header says ACTIVE",
                          timeout=15)
        assert actions(app) == [(1, "pause"), (1, "activate")]
    assert app.errors == []


async def test_a_section_key_returns_to_that_sections_list_from_any_depth() -> None:
    app = FixedDashboard()
    async with app.run_test(size=SIZE) as pilot:
        await press(pilot, "2", "enter", "l")
        await until_async(on(app, LogsScreen), "a trial's logs, opened from experiment 1",
                          timeout=15)
        assert len(app.screen_stack) == 3
        await press(pilot, "2")
        await until_async(on(app, ExperimentsScreen), "the experiments list", timeout=15)
        assert len(app.screen_stack) == 1
        await press(pilot, "1", "enter")
        await until_async(on(app, ExperimentScreen), "experiment 1, opened from the queue",
                          timeout=15)
        await press(pilot, "1")
        await until_async(on(app, QueueScreen), "the queue", timeout=15)
        assert len(app.screen_stack) == 1
        await press(pilot, "2", "enter", "l", "1")  # to another section and back
        await until_async(on(app, QueueScreen), "the queue", timeout=15)
        await press(pilot, "2")
        await until_async(on(app, ExperimentsScreen), "the experiments list, not the logs",
                          timeout=15)
        assert len(app.screen_stack) == 1
    assert app.errors == []


@pytest.mark.parametrize("steps", [[], ["2"], ["2", "enter"]],
                         ids=["queue", "experiments", "experiment"])
async def test_c_only_asks_and_says_checkpoints_are_kept(steps: list[str]) -> None:
    app = FixedDashboard()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        await press(pilot, *steps, "c")
        await until_async(on(app, ConfirmScreen), "the cancel dialog", timeout=15)
        assert "Cancel experiment 1" in str(app.screen.query_one("#question").render())
        consequence = str(app.screen.query_one("#consequence").render())
        assert "asked to checkpoint and stop" in consequence, consequence
        assert "Checkpoints, logs and metrics are kept" in consequence, consequence
        await pilot.pause(0.5)
        assert actions(app) == [], "c alone canceled"
        await press(pilot, "n")
        await until_async(lambda: not isinstance(app.screen, ConfirmScreen), "the dialog gone",
                          timeout=15)
        await until_async(lambda: any("left as it was" in t for t in toasts(app)), "said so",
                          timeout=15)
        assert actions(app) == []
        await press(pilot, "c", "y")
        await until_async(lambda: actions(app) == [(1, "cancel")], "canceled after y", timeout=15)
    assert app.errors == []


async def test_toasts_stay_with_their_section() -> None:
    app = FixedDashboard()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        app.screen.notify("about the queue", timeout=60)
        await pilot.pause(0.2)
        assert toasts(app) == ["about the queue"]
        await press(pilot, "2")
        await until_async(on(app, ExperimentsScreen), "the experiments list", timeout=15)
        await pilot.pause(0.2)
        assert toasts(app) == [], "a toast about the queue on the experiments list"
        app.screen.notify("about the experiments", timeout=60)
        await press(pilot, "question_mark", "escape")  # a screen over it, then back
        assert toasts(app) == ["about the experiments"]


def chart(app: FixedDashboard) -> str:
    """The chart's title and plot as drawn."""
    return (f"{app.screen.query_one('#chart-title').render()}\n"
            f"{app.screen.query_one('#chart', PlotextPlot).render().plain}")


async def test_a_trial_without_metrics_says_so_in_the_chart() -> None:
    app = FixedDashboard(client=NoMetrics)
    async with app.run_test(size=SIZE) as pilot:
        await press(pilot, "2", "enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen)
                    and "trial 1: no validation metrics yet" in chart(app), "said so", timeout=15)
        await press(pilot, "g")
        await until_async(lambda: "trial 1: no training metrics yet" in chart(app), "said so",
                          timeout=15)
    assert app.errors == []


class Trial2Unreadable(FixedClient):
    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        if trial_id == 2:
            raise DettuiError("the master is restarting")
        return await super().metric_series(trial_id, group, max_points, after_steps)


async def test_metrics_that_cannot_be_read_are_said_so_not_another_trials_chart() -> None:
    app = FixedDashboard(client=Trial2Unreadable)
    async with app.run_test(size=SIZE) as pilot:
        await press(pilot, "2", "enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen)
                    and "trial 1: validation_loss (validation)" in chart(app), "trial 1",
                          timeout=15)
        await press(pilot, "down")
        await until_async(lambda: "trial 2: metrics not read (the master is restarting)"
                    in chart(app), "trial 2's chart says why it is empty", timeout=15)
        assert "trial 1" not in chart(app) and "0.690" not in chart(app), chart(app)
        await press(pilot, "up")  # trial 1 is read again
        await until_async(lambda: "trial 1: validation_loss (validation)" in chart(app), "trial 1",
                          timeout=15)
    assert app.errors == []
