"""The dashboard shows an experiment's search warnings (issue 31, item 1): a marker after the
state in the experiments list, and the warning in the experiment screen's header, as plain
text (a metric name is user text: `[b]` in it is shown, never read as markup)."""

from __future__ import annotations

from typing import Any

from dettui.screens.experiment import ExperimentScreen
from dettui.screens.experiments import ExperimentsScreen
from tests.poll import until_async
from tests.tui.fixed import EXPERIMENTS, FixedClient, FixedDashboard

WARNING = ("validation metrics lack searcher.metric '[b]acc[/b]' (reported: val_loss): no "
           "trial is ranked and no checkpoint is best")
WARNED = [{**EXPERIMENTS[0], "warnings": [WARNING]}, *EXPERIMENTS[1:]]


class Warned(FixedClient):
    """Experiment 1 has a warning; the others none."""

    async def changes(self, topics: list[str], **kw: Any):  # type: ignore[no-untyped-def]
        async for change in super().changes(topics, **kw):
            if change["topic"].partition("?")[0] == "experiments":
                change = {**change, "upsert": WARNED}
            yield change

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return {**await super().experiment(exp_id), "warnings": [WARNING]}


async def test_the_list_marks_and_the_header_says_the_warning() -> None:
    app = FixedDashboard(client=Warned)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.press("2")
        await until_async(lambda: isinstance(app.screen, ExperimentsScreen)
                          and app.screen.table.row("1") is not None, "the experiments")
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        await until_async(lambda: (screen.table.row("1") or {}).get("state"),
                          "experiment 1's state", done=lambda s: s == "ACTIVE !")
        assert (screen.table.row("3") or {}).get("state") == "COMPLETED"  # no warning: no mark
        await pilot.press("enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen), "the experiment")
        await until_async(lambda: str(app.screen.query_one("#title").render()),
                          "the header's warning", done=lambda h: WARNING in h)
