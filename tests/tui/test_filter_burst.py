"""Keys typed right after `/` go to the filter box (review 31, N16): in a burst (tmux, a fast
typist, a terminal without bracketed paste) `/sn` re-sorted the table (`s`) and opened the
New Experiment dialog (`n`), as the box took focus only after the keys already read; a paste
on the table never fires a row action (p, a, c, x) but goes to the filter (its first
line, as a paste into the box)."""

from __future__ import annotations

import shutil

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from dettui.screens.base import ApiScreen
from dettui.screens.experiments import ExperimentsScreen
from dettui.screens.queue import QueueScreen
from tests.conftest import SAMPLE, Served
from tests.poll import until, until_async
from tests.tui.fixed import FixedDashboard
from tests.tui.test_tmux import Tmux


async def _open(pilot: Pilot[None], section: str, kind: type[ApiScreen]) -> ApiScreen:
    app = pilot.app
    await pilot.press(section)
    await until_async(lambda: isinstance(app.screen, kind) and app.screen.table.row_count > 0,
                      "the table's rows")
    screen = app.screen
    assert isinstance(screen, ApiScreen)
    return screen


def _burst(pilot: Pilot[None], *keys: tuple[str, str]) -> None:
    """Keys as a terminal's read hands them over: all queued before the first is handled."""
    driver = pilot.app._driver
    assert driver is not None
    for key, char in keys:
        event = events.Key(key, char)
        event.set_sender(pilot.app)
        driver.send_message(event)


@pytest.mark.parametrize(("section", "kind"), [("2", ExperimentsScreen), ("1", QueueScreen)])
async def test_keys_typed_right_after_slash_go_to_the_filter(section: str,
                                                             kind: type[ApiScreen]) -> None:
    app = FixedDashboard()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _open(pilot, section, kind)
        sort = (screen.table.sort_column, screen.table.sort_reverse)
        _burst(pilot, ("slash", "/"), ("s", "s"), ("n", "n"), ("p", "p"), ("c", "c"))
        box = screen.query_one("#filter", Input)
        await until_async(lambda: box.value, "the filter's text", done=lambda v: v == "snpc")
        await pilot.pause(0.3)
        assert app.screen is screen, app.screen  # no dialog opened
        assert (screen.table.sort_column, screen.table.sort_reverse) == sort
        assert app.client.actions == []  # type: ignore[attr-defined]
    assert app.errors == []


async def test_a_paste_on_the_table_goes_to_the_filter() -> None:
    app = FixedDashboard()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _open(pilot, "2", ExperimentsScreen)
        assert screen.table.has_focus
        screen.table.post_message(events.Paste("pac\nx"))
        box = screen.query_one("#filter", Input)
        await until_async(lambda: box.value, "the pasted text", done=lambda v: v == "pac")
        assert box.has_focus and app.screen is screen
        await pilot.pause(0.3)
        assert app.client.actions == []  # type: ignore[attr-defined]
    assert app.errors == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_slash_then_keys_in_one_tmux_burst(served: Served) -> None:
    """The reviewer's case in a real terminal: `/sn` sent by tmux in one write, 80x24."""
    served.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))
    tmux = Tmux(served.env(), "--master", served.url, size=(80, 24))
    try:
        tmux.wait_for("Job queue: 1 job")
        tmux.keys("2")
        tmux.wait_for("Experiments: 1")
        tmux.keys("/sn")
        screen = until(tmux.screen, "the filter box with 'sn'",
                       done=lambda s: any(line.strip("▊▎ ").startswith("sn")
                                          for line in s.splitlines()))
        assert "Experiment config" not in screen, screen  # no New experiment dialog
        tmux.keys("Escape", "Escape", "q")
    finally:
        tmux.close()
