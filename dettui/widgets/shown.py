"""A number with the text a table shows for it: `Shown(0.0012345678, "0.0012346")` reads as its
text in a cell and sorts, filters (`lr>0.001`) and compares as the number itself, so rounding
for the screen never changes an order or a match. Plain `float`, so tables need no hook."""

from __future__ import annotations

import math
from typing import Any


class Shown(float):
    """A float whose `str()` is the text given."""

    text: str

    def __new__(cls, value: float, text: str) -> Shown:
        number = super().__new__(cls, value)
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[Any, ...]:
        return (Shown, (float(self), self.text))


def number(value: Any) -> float | None:
    """`value` if it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def short(value: Any) -> Any:
    """A metric or hyperparameter as a cell: a float to 5 significant digits (`Shown`, so it
    still sorts and filters by its full value); an int, text or None as it is."""
    if isinstance(value, float) and not isinstance(value, Shown):
        return Shown(value, f"{value:.5g}")
    return value
