"""Numbers with the text a table shows for them: `Short(0.0012345678)` reads as "0.0012346",
`Shown(97.0, "▃▇█ 97%")` as its text, in a cell; both sort, filter (`lr>0.001`) and compare
as the number itself, so rounding for the screen never changes an order or a match. They are
`float`s, so tables need no hook (and cost what a float costs: the text is made when read)."""

from __future__ import annotations

import math
from typing import Any


class Short(float):
    """A float that reads as 5 significant digits (formatted when a table reads it)."""

    __slots__ = ()

    def __str__(self) -> str:
        return f"{self:.5g}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Short, (float(self),))


class Shown(float):
    """A float whose `str()` is the text given."""

    __slots__ = ("text",)
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
    """`value` as a float if it is a finite number (not a bool), else None: an int past a
    float's range (a hyperparameter `10**400`, which YAML and JSON allow) is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def short(value: Any) -> Any:
    """A metric or hyperparameter as a cell: a float to 5 significant digits (`Shown`, so it
    still sorts and filters by its full value); an int, text or None as it is."""
    if type(value) is float:
        return Short(value)
    return value
