"""The compare colours: Rich's name and the ANSI number given to plotext are the same colour."""

from __future__ import annotations

from rich.color import Color

from dettui.widgets.trial_colours import PALETTE, colour, plot_colour


def test_rich_and_plotext_get_the_same_ansi_colour_and_they_cycle() -> None:
    for i, (name, number) in enumerate(PALETTE):
        assert Color.parse(name).number == number == plot_colour(i)
        assert colour(i) == name
    assert len({n for _, n in PALETTE}) == len(PALETTE)
    assert colour(len(PALETTE)) == PALETTE[0][0]
