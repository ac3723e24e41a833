"""The compare colours are names both the chart (plotext) and the table (Rich) take."""

from __future__ import annotations

from plotext._dict import color_codes
from rich.color import Color

from dettui.widgets.trial_colours import PALETTE, colour


def test_every_colour_is_known_to_rich_and_plotext_and_they_cycle() -> None:
    for name in PALETTE:
        Color.parse(name)
        assert name in color_codes
    assert len(set(PALETTE)) == len(PALETTE)
    assert colour(0) == PALETTE[0] and colour(len(PALETTE)) == PALETTE[0]
