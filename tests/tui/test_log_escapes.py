"""ANSI in logs (issue 29, attack 7) in the dashboard: the log view shows a trial's escape
sequences and other control characters escaped, as `dettui trial logs` prints them, and its
colour codes not at all; what is drawn on screen carries none of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from dettui.screens.logs import LogsScreen
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard
from tests.tui.test_keys import SIZE, on, press

LINES = [
    ("\x1b]0;pwned\x07title \x1b[2Jcleared\n", "\\x1b]0;pwned\\x07title \\x1b[2Jcleared"),
    ("\x9b31mC1 \x85 \u202eevil", "\\x9b31mC1 \\x85 \\u202eevil"),
    ("\x1b[31mred\x1b[0m [bold]not markup[/]", "red [bold]not markup[/]"),
    ("two\nlines\r\n", "two\\nlines"),
]


class HostileLogs(FixedClient):
    async def trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for text, _shown in LINES:
            yield {"rankId": 0, "message": text}
        await asyncio.Event().wait()


async def test_ansi_in_logs_is_shown_escaped_in_the_log_view() -> None:
    app = FixedDashboard(client=HostileLogs)
    async with app.run_test(size=SIZE) as pilot:
        await press(pilot, "2", "enter", "l")
        await until_async(on(app, LogsScreen), "a trial's logs", timeout=15)
        screen = app.screen
        assert isinstance(screen, LogsScreen)
        await until_async(lambda: screen.log_widget.line_count == len(LINES), "the lines",
                          timeout=15)
        assert list(screen.log_widget.lines) == [shown for _text, shown in LINES]
        drawn = "".join(segment.text for y in range(SIZE[1])
                        for segment in screen.log_widget.render_line(y))
        assert "\\x1b]0;pwned\\x07title" in drawn and "[bold]not markup[/]" in drawn
        assert not set(drawn) & set("\x1b\x07\x85\x9b\u202e"), repr(drawn)
    assert app.errors == []
