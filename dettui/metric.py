"""The searcher metric's rules, stated once: which reported values are numbers, how they rank,
and which is best. Used by the master (trial views, the best-metric route, checkpoint GC), the
searchers and the CLI.

- A value is a number when it is an int or float, not a bool. Anything else is missing.
- NaN is a number that ranks last: the searcher treats it as the worst possible result (a
  diverged trial is not promoted), and it is never a best validation. ±inf rank as usual.
- `smaller_is_better` (Determined's default: True) turns values into scores where lower wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")
SMALLER_IS_BETTER = True  # Determined's default for searcher.smaller_is_better


def number(metrics: Mapping[str, Any] | None, name: str) -> float | None:
    """`metrics[name]` as a float, or None when missing or not a number."""
    value = (metrics or {}).get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def score(value: float, smaller_is_better: bool) -> float:
    """`value` as a score where lower is better; NaN scores worst of all."""
    if math.isnan(value):
        return math.inf
    return value if smaller_is_better else -value


def candidate(metrics: Mapping[str, Any] | None, name: str) -> float | None:
    """`metrics[name]` when it can be a best: a number that is not NaN; else None."""
    value = number(metrics, name)
    return None if value is None or math.isnan(value) else value


def improves(value: float | None, best: float | None, smaller_is_better: bool) -> bool:
    """Whether `value` is a new best over `best` (None: there is none yet). Missing values and
    NaN never are; any other value beats no best (or a NaN one); an equal one does not (the
    first of equals stays best)."""
    if value is None or math.isnan(value):
        return False
    if best is None or math.isnan(best):
        return True
    return score(value, smaller_is_better) < score(best, smaller_is_better)


def best(items: Iterable[T], value_of: Callable[[T], float | None],
         smaller_is_better: bool) -> T | None:
    """The item with the best value (the first of equals, in the order given), ignoring items
    without a number and NaNs; None when there is none."""
    found: T | None = None
    found_value: float | None = None
    for item in items:
        value = value_of(item)
        if improves(value, found_value, smaller_is_better):
            found, found_value = item, value
    return found
