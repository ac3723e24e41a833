"""Table columns and how they share a width: fixed columns keep theirs, fitted ones grow to
their content (up to a cap) and shrink to a floor, and when even the floors do not fit, the
least important columns (highest `priority` number) are left out first. Pure: no widgets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

GAP = 2  # cells between columns
COMFORT = 20  # a fitted column at this width (or less) counts as fitting when columns are dropped
FIT_FLOOR = 10  # ... and shrinks to this (or its label) when even the others do not fit


@dataclass(frozen=True)
class Column:
    """One column: `key` in the row dicts, a header `label`, a fixed `width` or None to fit;
    `priority` 0 is always shown, higher numbers are left out first when the table is narrow."""

    key: str
    label: str
    width: int | None = None
    align: str = "left"  # "left" | "right"
    sort_key: Callable[[Any], Any] | None = None  # cell value -> sort value
    priority: int = 0
    cap: int | None = None  # a fitted column grows to at most this (None: the table's cap)

    def __post_init__(self) -> None:
        if self.align not in ("left", "right"):
            raise ValueError(f"column {self.key}: align must be 'left' or 'right'")
        if self.width is not None and self.width < 1:
            raise ValueError(f"column {self.key}: width must be ≥ 1")
        if self.cap is not None and self.cap < 1:
            raise ValueError(f"column {self.key}: cap must be ≥ 1")
        if self.priority < 0:
            raise ValueError(f"column {self.key}: priority must be ≥ 0")


def _total(widths: Sequence[int]) -> int:
    shown = [w for w in widths if w]
    return sum(shown) + GAP * max(len(shown) - 1, 0)


def arrange(columns: Sequence[Column], wanted: Sequence[int], room: int | None) -> list[int]:
    """Each column's width on screen, 0 for one left out. `wanted`: what each column would
    take (fixed width, or its content's width); `room`: the cells there are (None: any).
    Columns are left out, least important first, until the rest fit with fitted columns at a
    comfortable width; then fitted columns get what is spare, down to their floor."""
    if room is None or _total(wanted) <= room:
        return list(wanted)
    fixed = [c.width is not None for c in columns]
    comfortable = [w if f else min(w, COMFORT) for f, w in zip(fixed, wanted, strict=True)]
    for i in sorted(range(len(columns)), key=lambda i: (-columns[i].priority, -i)):
        if _total(comfortable) <= room or columns[i].priority == 0:
            break
        comfortable[i] = 0
    widths = [0 if not c else w if f else min(w, max(FIT_FLOOR, len(col.label)))
              for c, f, w, col in zip(comfortable, fixed, wanted, columns, strict=True)]
    spare = room - _total(widths)
    for i in range(len(columns)):  # fitted columns get back what is spare, in order
        if widths[i] and not fixed[i] and spare > 0:
            more = min(wanted[i] - widths[i], spare)
            widths[i] += more
            spare -= more
    return widths
