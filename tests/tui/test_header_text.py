"""The experiment screen's header is printable text (review 31, N10): its warning line began
with a newline that was cleaned into U+FFFD (`ERROR — metric val_loss (validation)�!`). The
screen's own line break starts a line; a newline or escape inside the master's text (user
text) is still shown as �, never passed to the terminal."""

from __future__ import annotations

from typing import Any

from dettui.screens.experiment import ExperimentScreen
from dettui.widgets.safe import plain_lines
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard

WARNING = "validation metrics lack searcher.metric 'acc' (reported: val_loss)"


class Warned(FixedClient):
    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return {**await super().experiment(exp_id), "warnings": [WARNING]}


def _printable(text: str) -> bool:
    return all(line.isprintable() for line in text.split("\n"))


async def test_the_warning_is_a_line_of_its_own_with_no_replacement_character() -> None:
    app = FixedDashboard(client=Warned)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.press("2")
        await pilot.press("enter")
        await until_async(lambda: isinstance(app.screen, ExperimentScreen), "the experiment")
        header = await until_async(lambda: str(app.screen.query_one("#title").render()),
                                   "the header's warning", done=lambda h: WARNING in h)
        assert "\ufffd" not in header and _printable(header), repr(header)
        first, second = header.split("\n")
        assert first.startswith("Experiment 1 ") and " — metric " in first, repr(header)
        assert second.startswith(f"! warning: {WARNING}"), repr(header)


def test_only_the_screens_own_line_break_starts_a_line() -> None:
    text = plain_lines("Experiment 1 evil\nname\x1b[2J: ", "ACTIVE", "\n! warning: a\nb").plain
    assert text == "Experiment 1 evil\ufffdname: ACTIVE\n! warning: a\ufffdb", repr(text)
