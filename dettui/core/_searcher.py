"""The 0.38 searcher operations: one operation of `max_length`, progress reported as a fraction.

Deprecated in Determined (report progress with `train.report_progress` and exit instead), kept
so scripts written against it run unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dettui.core._distributed import DistributedContext
from dettui.core._info import ClusterInfo

TIME_UNITS = ("batches", "records", "epochs")


def configured_length(config: dict[str, Any]) -> dict[str, int] | int | None:
    """How long a trial trains: `searcher.max_length`, else `max_time` in its `time_metric`
    when that metric is batches, records or epochs (ASHA configs); None if neither."""
    searcher = config.get("searcher") or {}
    raw = searcher.get("max_length")
    if isinstance(raw, dict) and len(raw) == 1:
        unit, value = next(iter(raw.items()))
        return {str(unit): int(value)}
    if isinstance(raw, int):
        return raw
    if searcher.get("max_time") and searcher.get("time_metric") in TIME_UNITS:
        return {str(searcher["time_metric"]): int(searcher["max_time"])}
    return None


def _length(config: dict[str, Any]) -> int:
    length = configured_length(config)
    if length is None:
        raise RuntimeError("core.searcher needs searcher.max_length (or max_time with "
                           "time_metric batches, records or epochs) in the experiment config")
    return int(next(iter(length.values()))) if isinstance(length, dict) else length


class SearcherOperation:
    def __init__(self, train: Any, length: int, is_chief: bool) -> None:
        self._train = train
        self.length = length
        self._is_chief = is_chief
        self._completed = False

    def report_progress(self, length: float) -> None:
        if self._is_chief:
            self._train.report_progress(min(max(length / self.length, 0.0), 1.0))

    def report_completed(self, searcher_metric: Any = None) -> None:
        if self._completed:
            raise RuntimeError("report_completed called twice for one operation")
        self._completed = True


class SearcherContext:
    def __init__(self, train: Any, info: ClusterInfo, dist: DistributedContext) -> None:
        self._train = train
        self._info = info
        self._dist = dist

    def operations(self, *_: Any, **__: Any) -> Iterator[SearcherOperation]:
        length = self._dist.broadcast(_length(self._info.trial.config)
                                      if self._dist.is_chief else None)
        yield SearcherOperation(self._train, int(length), self._dist.is_chief)

    def get_configured_units(self) -> Any:
        return None


class DummySearcherContext:
    def __init__(self, length: int = 1) -> None:
        self._length = length

    def operations(self, *_: Any, **__: Any) -> Iterator[SearcherOperation]:
        from dettui.core._train import DummyTrainContext

        yield SearcherOperation(DummyTrainContext(), self._length, True)

    def get_configured_units(self) -> Any:
        return None
