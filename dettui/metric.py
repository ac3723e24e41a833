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


def best(items: Iterable[T], value_of: Callable[[T], float | None],
         smaller_is_better: bool) -> T | None:
    """The item with the best value (the first of equals, in the order given), ignoring items
    without a number and NaNs; None when there is none."""
    found: T | None = None
    found_score = math.inf
    for item in items:
        value = value_of(item)
        if value is None or math.isnan(value):
            continue
        s = score(value, smaller_is_better)
        if found is None or s < found_score:
            found, found_score = item, s
    return found
