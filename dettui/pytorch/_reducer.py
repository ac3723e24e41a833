"""Metric reducers: Determined's `Reducer` for `evaluation_reducer()` and `MetricReducer` for
`context.wrap_reducer()` (per-slot, then cross-slot reduction)."""

from __future__ import annotations

import abc
import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Reducer(enum.Enum):
    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


def reduce_values(reducer: Reducer, rows: list[tuple[float, int]]) -> float:
    """(value, weight) rows reduced: AVG weights by the rows' weights (batch sizes)."""
    values = [v for v, _ in rows]
    if reducer is Reducer.AVG:
        total = sum(w for _, w in rows)
        return sum(v * w for v, w in rows) / total if total else float("nan")
    if reducer is Reducer.SUM:
        return float(sum(values))
    return float(max(values) if reducer is Reducer.MAX else min(values))


class MetricReducer(metaclass=abc.ABCMeta):
    """Reduce values gathered during a training or validation window: `per_slot_reduce` on every
    rank, then `cross_slot_reduce` on the chief with every rank's result."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget the values of the last window (called before each one)."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This rank's picklable partial result."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        """The metric (with `name`) or a dict of metrics (without) from every rank's part."""


class _SimpleReducer(MetricReducer):
    """A reduction function over every value `update()`d, in their original order."""

    _MISSING = object()

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn
        self.values: list[Any] = []

    def reset(self) -> None:
        self.values = []

    def update(self, value: Any) -> None:
        self.values.append(value)

    def per_slot_reduce(self) -> Any:
        return self.values

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        rows = itertools.zip_longest(*per_slot_metrics, fillvalue=self._MISSING)
        return self.fn([m for row in rows for m in row if m is not self._MISSING])


@dataclass
class Wrapped:
    reducer: MetricReducer
    name: str | None
    for_training: bool
    for_validation: bool


def wrap(reducer: MetricReducer | Callable[[list[Any]], Any], name: str | None,
         for_training: bool, for_validation: bool) -> Wrapped:
    if not isinstance(reducer, MetricReducer):
        if not callable(reducer):
            raise TypeError("wrap_reducer takes a MetricReducer or a function of a list")
        reducer = _SimpleReducer(reducer)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"wrap_reducer's name must be a string, not {type(name).__name__}")
    reducer.reset()
    return Wrapped(reducer, name, for_training, for_validation)


def reduce_wrapped(wrapped: list[Wrapped], allgather: Callable[[Any], list[Any]],
                   is_chief: bool, training: bool) -> dict[str, Any]:
    """Every wrapped reducer of this window: per slot, gathered, cross-slot on the chief
    (others get {}); then reset for the next window."""
    mine = [w for w in wrapped if (w.for_training if training else w.for_validation)]
    if not mine:
        return {}
    gathered = allgather([w.reducer.per_slot_reduce() for w in mine])
    out: dict[str, Any] = {}
    for i, w in enumerate(mine):
        w.reducer.reset()
        if not is_chief:
            continue
        value = w.reducer.cross_slot_reduce([part[i] for part in gathered])
        if w.name is not None:
            if isinstance(value, dict):
                raise ValueError(f"reducer '{w.name}' has a name, so cross_slot_reduce must "
                                 "return one value, not a dict")
            out[w.name] = value
        elif isinstance(value, dict):
            out.update(value)
        else:
            raise ValueError("a reducer wrapped without a name must return a dict of metrics "
                             f"from cross_slot_reduce, not {type(value).__name__}")
    return out
