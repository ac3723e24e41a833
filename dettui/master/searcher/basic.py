"""`single`, `random` and `grid`: trials from samples or grid points, at most
`max_concurrent_trials` open at once (0: no limit but the search's size), a new one whenever
one closes."""

from __future__ import annotations

from typing import Any

from dettui.config import hyperparameters as hp
from dettui.config.schema import Searcher as SearcherConfig
from dettui.master.searcher.base import Action, ExitReason, Searcher, required


class RandomSearch(Searcher):
    name = "random"

    def __init__(self, config: SearcherConfig, hparams: dict[str, Any], seed: int) -> None:
        super().__init__(config, hparams, seed)
        self.max_trials = self._max_trials()
        self.concurrency = config.max_concurrent_trials or self.max_trials

    def _max_trials(self) -> int:
        return required(self.config.max_trials, "max_trials", self.name)

    def _more(self) -> bool:
        return len(self.created) - len(self.invalid) < self.max_trials

    def _next(self) -> Action | None:
        return self._create() if self._more() else None

    def _refill(self) -> list[Action]:
        out: list[Action] = []
        open_now = len(self.open_trials())  # once per call, then counted as trials are added
        while open_now < self.concurrency:
            action = self._next()
            if action is None:
                break
            out.append(action)
            if action.request_id not in self.closed:  # a stored state may close ids early
                open_now += 1
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

    def _max_trials(self) -> int:
        return 1


class GridSearch(RandomSearch):
    """Every point of the grid once (Determined's count rules), in a fixed order."""

    name = "grid"

    def __init__(self, config: SearcherConfig, hparams: dict[str, Any], seed: int) -> None:
        self.points = hp.Grid(hparams)
        super().__init__(config, hparams, seed)

    def _max_trials(self) -> int:
        return len(self.points)

    def _more(self) -> bool:
        return len(self.created) < len(self.points)

    def _next(self) -> Action | None:
        if not self._more():
            return None
        return self._create(self.points.point(len(self.created)))
