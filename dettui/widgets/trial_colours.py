"""The colour of each trial compared at once: the row's marker in the trials table and its
curve on the compare chart are the same colour (by the trial's place in the selection)."""

from __future__ import annotations

# The terminal's own ANSI colours (so they suit its theme), distinct on dark and light
# backgrounds, in the order they are handed out: (Rich's name, the ANSI number plotext takes).
PALETTE = (("cyan", 6), ("magenta", 5), ("green", 2), ("yellow", 3), ("blue", 4), ("red", 1),
           ("bright_cyan", 14), ("bright_magenta", 13), ("bright_green", 10),
           ("bright_yellow", 11))


def colour(index: int) -> str:
    """The Rich colour of the `index`-th trial of a selection (0-based), cycling."""
    return PALETTE[index % len(PALETTE)][0]


def plot_colour(index: int) -> int:
    """The same colour as plotext takes it (an ANSI number)."""
    return PALETTE[index % len(PALETTE)][1]
