"""A bug in a screen never ends the dashboard: an exception in a key's action, in a message
handler or in a worker is logged and shown as an error toast, and the app goes on (the master
runs in a process of its own, so it is not affected either: tests/tui/test_tmux.py kills the
dashboard outright and the trial runs on)."""

from __future__ import annotations

from typing import Any

import pytest

from dettui.screens.experiments import ExperimentsScreen
from dettui.screens.queue import QueueScreen
from tests.tui.fixed import FixedDashboard


class Boom(RuntimeError):
    pass


def explode(*_: Any, **__: Any) -> None:
    raise Boom("a bug in a screen")


def toasted(app: FixedDashboard) -> bool:
    return any(n.title == "dashboard error" and "a bug in a screen" in n.message
               for n in app._notifications)


@pytest.mark.parametrize("where", ["action", "handler", "worker"])
async def test_an_exception_in_a_screen_is_a_toast_and_the_app_goes_on(
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    if where == "action":  # `s` on the queue
        monkeypatch.setattr(QueueScreen, "action_sort_next", explode)
    elif where == "handler":  # Enter in the filter box: an @on(Input.Submitted) handler
        monkeypatch.setattr(QueueScreen, "view_changed", explode)
    else:  # the feed worker, after the first snapshot
        monkeypatch.setattr(QueueScreen, "on_feed", explode)
    app = FixedDashboard()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.3)
        if where == "action":
            await pilot.press("s")
        elif where == "handler":
            await pilot.press("slash", "x", "enter")
        await pilot.pause(0.3)
        assert app.errors and all(isinstance(e, Boom) for e in app.errors), app.errors
        assert toasted(app)
        assert app.is_running
        await pilot.press("2")  # the app still answers keys
        await pilot.pause(0.3)
        assert isinstance(app.screen, ExperimentsScreen)
        assert app.screen.table.row_count == 3
        await pilot.press("1")
        await pilot.pause(0.3)
        assert isinstance(app.screen, QueueScreen)
        await pilot.press("J")  # and the broken screen's other keys still act
        await pilot.pause(0.3)
        assert app.client.actions, "the queue screen no longer acted"  # type: ignore[union-attr]


async def test_ctrl_c_says_in_plain_words_how_to_quit() -> None:
    """Textual answers Ctrl+C with a hint written in markup; the dashboard's toasts are plain
    text (they carry user text), so it showed `Press [b]ctrl+q[/b] to quit the app`."""
    app = FixedDashboard()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("ctrl+c")
        await pilot.pause(0.2)
        hints = [n.message for n in app._notifications if n.title == "Do you want to quit?"]
        assert hints and "[b]" not in hints[-1] and "ctrl+q" in hints[-1], hints
        assert app.is_running
