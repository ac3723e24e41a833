"""`single`, `random` and `grid`: trials from samples or grid points, at most
`max_concurrent_trials` open at once, a new one whenever one closes."""

from __future__ import annotations

from typing import Any

from dettui.config import hyperparameters as hp
from dettui.master.searcher.base import Action, ExitReason, Searcher

DEFAULT_CONCURRENCY = 16


class RandomSearch(Searcher):
    name = "random"

    def __init__(self, config: dict[str, Any], hparams: dict[str, Any], seed: int) -> None:
        super().__init__(config, hparams, seed)
        self.max_trials = int(config.get("max_trials") or 1)
        concurrency = config.get("max_concurrent_trials")
        concurrency = DEFAULT_CONCURRENCY if concurrency is None else int(concurrency)
        self.concurrency = self.max_trials if concurrency <= 0 else concurrency

    def _more(self) -> bool:
        return len(self.created) - len(self.invalid) < self.max_trials

    def _next(self) -> Action | None:
        return self._create() if self._more() else None

    def _refill(self) -> list[Action]:
        out: list[Action] = []
        while len(self.open_trials()) < self.concurrency:
            action = self._next()
            if action is None:
                break
            out.append(action)
        return out

    def initial(self) -> list[Action]:
        return self._refill()

    def exited(self, request_id: int) -> list[Action]:
        super().exited(request_id)
        return self._refill()

    def exited_early(self, request_id: int, reason: ExitReason) -> list[Action]:
        super().exited_early(request_id, reason)
        return self._refill()

    def progress(self, trial_progress: dict[int, float]) -> float:
        valid = [r for r in self.created if r not in self.invalid]
        done = sum(1.0 if r in self.closed else min(max(trial_progress.get(r, 0.0), 0.0), 1.0)
                   for r in valid)
        return min(done / self.total(), 1.0) if self.total() else 1.0

    def total(self) -> int:
        return self.max_trials


class SingleSearch(RandomSearch):
    """One trial: the first draw from the experiment seed."""

    name = "single"

    def __init__(self, config: dict[str, Any], hparams: dict[str, Any], seed: int) -> None:
        super().__init__({**config, "max_trials": 1, "max_concurrent_trials": 1}, hparams, seed)


class GridSearch(RandomSearch):
    """Every point of the grid once (Determined's count rules), in a fixed order."""

    name = "grid"

    def __init__(self, config: dict[str, Any], hparams: dict[str, Any], seed: int) -> None:
        super().__init__(config, hparams, seed)
        self.points = hp.grid(hparams)
        self.max_trials = len(self.points)
        concurrency = config.get("max_concurrent_trials")
        concurrency = DEFAULT_CONCURRENCY if concurrency is None else int(concurrency)
        self.concurrency = self.max_trials if concurrency <= 0 else concurrency

    def _more(self) -> bool:
        return len(self.created) < len(self.points)

    def _next(self) -> Action | None:
        if not self._more():
            return None
        return self._create(self.points[len(self.created)])
