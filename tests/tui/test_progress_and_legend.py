"""The dashboard's experiments list (issue 31 review, N3 and N4): an ERROR or CANCELED
experiment shows the progress its master keeps (as `dettui e list`, `e describe` and the JSON),
and the title explains the `!` marker when a row has it."""

from __future__ import annotations

from typing import Any

from dettui.screens.experiments import ExperimentsScreen
from tests.poll import until_async
from tests.tui.fixed import EXPERIMENTS, FixedClient, FixedDashboard

ENDED = [{**EXPERIMENTS[0], "state": "STATE_CANCELED", "progress": 0.25,
          "warnings": ["trial 1 exited with code 2 (boom)"]},
         {**EXPERIMENTS[1], "state": "STATE_ERROR", "progress": 0.5}, *EXPERIMENTS[2:]]


class Ended(FixedClient):
    async def changes(self, topics: list[str], **kw: Any):  # type: ignore[no-untyped-def]
        async for change in super().changes(topics, **kw):
            if change["topic"].partition("?")[0] == "experiments":
                change = {**change, "upsert": ENDED}
            yield change


async def test_ended_experiments_keep_their_progress_and_the_marker_is_explained() -> None:
    app = FixedDashboard(client=Ended)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.press("2")
        await until_async(lambda: isinstance(app.screen, ExperimentsScreen)
                          and (app.screen.table.row("1") or {}).get("state") == "CANCELED !",
                          "the experiments")
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        assert (screen.table.row("1") or {}).get("progress") == "25%"
        assert (screen.table.row("2") or {}).get("progress") == "50%"
        await until_async(lambda: str(screen.query_one("#title").render()), "the title",
                          done=lambda t: "! has warnings: enter shows them" in t)
