"""The colour of each trial compared at once: the row's marker in the trials table and its
curve on the compare chart are the same colour (by the trial's place in the selection)."""

from __future__ import annotations

# Distinct on dark and light terminals, in the order they are handed out; plotext and Rich
# both take these names (Rich has no "orange", plotext no "bright_cyan").
PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "red", "white")


def colour(index: int) -> str:
    """The colour of the `index`-th trial of a selection (0-based), cycling past the palette."""
    return PALETTE[index % len(PALETTE)]
