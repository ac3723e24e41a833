"""What a table cell's value reads as, sorts by and looks like at a given width: plain
text (never markup, no control characters), numbers before text, cut with … or padded."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text

from dettui.widgets.safe import clean

_CONTROLS = {i: " " for i in [*range(32), 127]}


def styled_pair(value: Any) -> bool:
    return (isinstance(value, tuple) and len(value) == 2
            and isinstance(value[1], str | Style))


def cell_text(value: Any) -> str:
    """The plain text of a cell value: what is shown, filtered on and (by default) sorted by."""
    if value is None:
        return ""
    if isinstance(value, Text):
        return clean(value.plain)
    if styled_pair(value):
        return cell_text(value[0])
    return clean(value)


def default_sort_key(value: Any) -> tuple[int, Any]:
    """Numbers (and numeric strings) numerically and first, everything else by casefolded text."""
    if styled_pair(value):
        value = value[0]
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return (0, value)
    text = cell_text(value)
    try:
        number = float(text)
    except ValueError:
        return (1, text.casefold())
    return (0, number) if number == number else (1, text.casefold())


class Descending:
    """Inverts the order of a sort value, so one ascending bisect serves descending views."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: Descending) -> bool:
        return bool(other.value < self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]


def fit(text: str, width: int, align: str) -> str:
    """`text` cut (with …) or padded to exactly `width` cells."""
    if not text.isprintable():
        text = text.translate(_CONTROLS)
    size = len(text) if text.isascii() else cell_len(text)
    if size > width:
        text = set_cell_size(text, width - 1) + "…" if width > 0 else ""
        size = width
    pad = " " * (width - size)
    return pad + text if align == "right" else text + pad
