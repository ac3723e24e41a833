"""Lengths in batches or epochs (TrainUnit), and metrics as plain numbers: the arithmetic of
the training loop."""

from __future__ import annotations

import inspect
import sys
from collections import abc
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class TrainUnit:
    """A length in batches or epochs (Determined's `pytorch.TrainUnit`): an int is a period
    (`Batch(100)`: every 100 batches), a container a schedule (`Batch([5, 30])`)."""

    def __init__(self, value: int | abc.Container[int]) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self.value!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.value)))

    @staticmethod
    def _from_searcher_unit(length: int, unit: str | None,
                            global_batch_size: int | None = None) -> TrainUnit:
        """`searcher.max_length` as a TrainUnit; records need `global_batch_size`."""
        if unit == "epochs":
            return Epoch(length)
        if unit == "records":
            if global_batch_size is None:
                raise ValueError("global_batch_size required for searcher unit Records.")
            return Batch._from_records(length, global_batch_size)
        if unit == "batches":
            return Batch(length)
        raise ValueError(f"unrecognized searcher unit {unit}")

    @staticmethod
    def _from_values(batches: int | None = None, records: int | None = None,
                     epochs: int | None = None,
                     global_batch_size: int | None = None) -> TrainUnit:
        """A config period (`min_validation_period: {batches: N}`); N < 1 means never."""
        if sum((batches is not None, records is not None, epochs is not None)) != 1:
            raise ValueError(f"invalid config: batches={batches} records={records} "
                             f"epochs={epochs}")
        if batches is not None:
            return Batch(batches if batches >= 1 else sys.maxsize)
        if records is not None:
            if not global_batch_size:
                raise ValueError("global_batch_size is required for RECORD units "
                                 "(hyperparameters.global_batch_size).")
            return Batch._from_records(records if records >= 1 else sys.maxsize,
                                       global_batch_size)
        return Epoch(epochs if epochs is not None and epochs >= 1 else sys.maxsize)

    def should_stop(self, step_num: int) -> bool:
        """Whether `step_num` (batches or epochs completed) is on this period or schedule."""
        if isinstance(self.value, int):
            if self.value < 1:
                return True
            return step_num != 0 and step_num % self.value == 0
        return step_num in self.value


class Epoch(TrainUnit):
    """Epochs: the training data loader's length in batches each."""


class Batch(TrainUnit):
    """Batches."""

    @staticmethod
    def _from_records(records: int, global_batch_size: int) -> Batch:
        return Batch(max(records // global_batch_size, 1))


def _scalar(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().float().mean().item() if value.numel() else float("nan")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _as_metrics(out: Any, what: str) -> dict[str, Any]:
    if isinstance(out, torch.Tensor):
        return {"loss": _scalar(out)}
    if not isinstance(out, dict):
        raise TypeError(f"{what} must return a dict of metrics (or a loss tensor), "
                        f"not {type(out).__name__}")
    return {str(k): _scalar(v) for k, v in out.items()}


def _mean(rows: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """Weighted mean of numeric metrics over (metrics, weight) rows; others keep the last."""
    sums: dict[str, float] = {}
    weights: dict[str, int] = {}
    last: dict[str, Any] = {}
    for metrics, weight in rows:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[key] = sums.get(key, 0.0) + float(value) * weight
                weights[key] = weights.get(key, 0) + weight
            else:
                last[key] = value
    out = dict(last)
    out.update({k: sums[k] / weights[k] for k in sums if weights[k]})
    return out


def _batch_len(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    return 1


def accepts(fn: Callable[..., Any], name: str, position: int) -> bool:
    """Determined's `util.has_param`: `fn` takes `name`, by name or at `position` (counting
    `self` for a bound method, as `getfullargspec` does)."""
    args = inspect.getfullargspec(fn).args
    return name in args or position < len(args)
