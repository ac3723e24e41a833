"""The command palette offers every binding of every screen with its key, and each one acts:
on this screen, after going to its section, or by saying what to open first. Help shows keys
as they are typed."""

from __future__ import annotations

from textual.binding import Binding
from textual.command import CommandPalette

from dettui.screens.help import key_label
from dettui.screens.palette import Actions, screens
from dettui.screens.queue import QueueScreen
from dettui.widgets.rowtable import RowTable
from tests.tui.fixed import FixedDashboard


def every_binding(app: FixedDashboard) -> set[str]:
    keys: dict[str, list[str]] = {}  # the app binds q and ctrl+q to quit: one entry, both keys
    for b in app.BINDINGS:
        if isinstance(b, Binding):
            keys.setdefault(b.action, []).append(key_label(b))
    wanted = {f"{'Go to ' if b.action.startswith('section(') else ''}{b.description} "
              f"({'/'.join(keys[b.action])})" for b in app.BINDINGS if isinstance(b, Binding)}
    for title, cls, _ in screens():
        wanted |= {f"{title}: {b.description} ({key_label(b)})" for b in cls.BINDINGS
                   if isinstance(b, Binding) and b.description}
    wanted |= {f"Table: {b.tooltip or b.description} ({key_label(b)})"
               for b in RowTable.BINDINGS if isinstance(b, Binding)}
    return wanted


async def test_every_binding_of_every_screen_is_in_the_palette_and_acts() -> None:
    app = FixedDashboard()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        offered = {entry.text for entry in Actions(app.screen).entries()}
        assert every_binding(app) <= offered, every_binding(app) - offered
        for text in ("Queue: Pause (p)", "Experiments: Kill… (x)", "Logs: Search (/)",
                     "Compare: Hparam scatter (h)", "Experiment: Compare (C)",
                     "Go to Cluster (3)", "Help (?)", "Quit (q/ctrl+q)"):
            assert text in offered, text
        assert len(offered) == len(list(Actions(app.screen).entries())), "no duplicates"

        async def choose(query: str) -> None:
            await pilot.press("ctrl+p")
            await pilot.pause(0.2)
            await pilot.press(*query)
            await pilot.pause(0.6)
            assert isinstance(app.screen, CommandPalette)
            await pilot.press("enter")
            await pilot.pause(0.5)

        await choose("experiments: kill")  # goes there, then asks before killing
        assert type(app.screen).__name__ == "ConfirmScreen"
        assert "Kill experiment 1" in str(app.screen.query_one("#question").render())
        await pilot.press("n")
        await pilot.pause(0.2)
        await choose("logs: next error")  # needs a trial's logs: says how to get there
        assert any("open a trial's logs first" in n.message for n in app._notifications)
        await choose("compare: log y")  # needs trials compared: says how
        assert any("open a comparison first: C on an experiment's trials" in n.message
                   for n in app._notifications)
        await pilot.press("1")
        await pilot.pause(0.3)
        await choose("queue: sort")  # on this screen
        assert isinstance(app.screen, QueueScreen) and app.screen.table.sort_column == "pos"
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        text = str(app.screen.query_one("#help-text").render())
        assert "  ?  " in text and "  /  " in text and "ctrl+p" in text
        assert "question_mark" not in text and "slash" not in text
    assert app.errors == []
