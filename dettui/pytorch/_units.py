"""Lengths in batches, and metrics as plain numbers: the arithmetic of the training loop."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Units:
    """What one "length" is worth in batches for this trial."""

    global_batch_size: int
    records_per_epoch: int
    batches_per_epoch: int

    def batches(self, length: Any, what: str) -> int:
        """{batches: N} | {records: N} | {epochs: N} (or a bare int of batches) → batches."""
        if isinstance(length, int):
            return length
        if not isinstance(length, dict) or len(length) != 1:
            raise ValueError(f"{what} must be one of {{batches: N}}, {{records: N}} or "
                             f"{{epochs: N}}, not {length!r}")
        unit, value = next(iter(length.items()))
        value = int(value)
        if unit == "batches":
            return value
        if unit == "records":
            return max(1, math.ceil(value / self.global_batch_size)) if value else 0
        if unit == "epochs":
            if self.records_per_epoch:
                per_epoch = max(1, self.records_per_epoch // self.global_batch_size)
            else:
                per_epoch = self.batches_per_epoch
            return value * per_epoch
        raise ValueError(f"{what}: unknown unit '{unit}' (batches, records or epochs)")


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


@dataclass(frozen=True)
class Period:
    """Every `every` batches (0: never), or at the batch counts in `at`."""

    every: int = 0
    at: frozenset[int] = frozenset()

    def due(self, batches: int, last: int) -> bool:
        if self.at:
            return batches in self.at and batches != last
        return bool(self.every) and batches - last >= self.every
