"""`async_halving` and `adaptive_asha` (SEMANTICS §6): asynchronous successive halving that
stops the worse trials of each rung, and brackets of it run as a tournament.

Rung i of an r-rung bracket needs `max(⌊T/d^(r−1−i)⌋, 1)` units of the time metric. On each
validation a trial climbs from its rung: too few units → wait; else its (smaller-is-better)
metric is inserted ascending (before equals) at index k; the top rung, or `k ≥ max(⌊len/d⌋, 1)`,
stops it; otherwise it is promoted and the next rung is checked. Every stop creates a new trial
in the same bracket while the bracket has trials left. One departure from Determined 0.38: a
trial that ends on its own without having been stopped also makes room for a new trial, so a
search never stalls with trials left to run and nothing running.
"""

from __future__ import annotations

import sys
from typing import Any

from dettui.config.schema import Length, asha_top_rungs
from dettui.config.schema import Searcher as SearcherConfig
from dettui.master.searcher.base import (
    Action,
    Create,
    ExitReason,
    Searcher,
    SearcherError,
    Stop,
    required,
)

EXITED_METRIC = sys.float_info.max  # what an errored trial scores in its rung
MODES = ("aggressive", "standard", "conservative")


def rung_units(num_rungs: int, divisor: float, max_time: int) -> list[int]:
    """The units of the time metric each rung of a `num_rungs` bracket needs."""
    return [max(int(max_time / divisor ** (num_rungs - 1 - i)), 1) for i in range(num_rungs)]


class Bracket:
    def __init__(self, num_rungs: int, max_trials: int, concurrency: int, divisor: float,
                 max_time: int) -> None:
        self.num_rungs = num_rungs
        self.max_trials = max_trials
        self.concurrency = concurrency
        self.divisor = divisor
        self.units = rung_units(num_rungs, divisor, max_time)
        self.metrics: list[list[tuple[int, float]]] = [[] for _ in range(num_rungs)]
        self.trial_rung: dict[int, int] = {}
        self.stopped: set[int] = set()
        self.completed = 0
        self.invalid = 0

    def initial_count(self) -> int:
        if self.concurrency > 0:
            return min(self.concurrency, self.max_trials)
        return max(1, min(int(self.divisor ** (self.num_rungs - 1)), self.max_trials))

    def has_room(self) -> bool:
        return len(self.trial_rung) - self.invalid < self.max_trials

    def insert(self, rung: int, request_id: int, value: float) -> int:
        row = self.metrics[rung]
        k = next((i for i, (_, v) in enumerate(row) if v >= value), len(row))
        row.insert(k, (request_id, value))
        return k

    def climb(self, request_id: int, units: float, value: float) -> bool:
        """Record a validation; True if the trial must stop."""
        for r in range(self.trial_rung.get(request_id, 0), self.num_rungs):
            self.trial_rung[request_id] = r
            if units < self.units[r]:
                return False
            k = self.insert(r, request_id, value)
            if r == self.num_rungs - 1:
                return True
            if k >= max(int(len(self.metrics[r]) / self.divisor), 1):
                return True
        return False

    def progress(self) -> float:
        seen = len(self.metrics[0])
        done = seen / (1.2 * self.max_trials)
        if seen == self.max_trials:
            done = max(done, (self.completed - self.invalid) / self.max_trials)
        return min(done, 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"num_rungs": self.num_rungs, "max_trials": self.max_trials,
                "concurrency": self.concurrency, "units": self.units,
                "metrics": [[[r, v] for r, v in row] for row in self.metrics],
                "trial_rung": {str(k): v for k, v in self.trial_rung.items()},
                "stopped": sorted(self.stopped), "completed": self.completed,
                "invalid": self.invalid}

    def load(self, state: dict[str, Any]) -> None:
        self.metrics = [[(int(r), float(v)) for r, v in row] for row in state["metrics"]]
        self.trial_rung = {int(k): int(v) for k, v in state["trial_rung"].items()}
        self.stopped = {int(r) for r in state["stopped"]}
        self.completed = int(state["completed"])
        self.invalid = int(state["invalid"])


max_rungs_for = asha_top_rungs  # the rungs of the longest bracket (the schema's rule)


def bracket_rungs(mode: str, max_rungs: int) -> list[int]:
    if mode == "aggressive":
        return [max_rungs]
    if mode == "standard":
        return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
    if mode == "conservative":
        return list(range(1, max_rungs + 1))
    raise ValueError(f"searcher.mode: '{mode}' is not one of {', '.join(MODES)}")


def bracket_trials(max_trials: int, divisor: float, brackets: list[int]) -> list[int]:
    weights = [divisor ** (r - 1) / r for r in brackets]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_concurrency(concurrency: int, divisor: float, trials: list[int]) -> list[int]:
    n = len(trials)
    if concurrency == 0:
        return [max(trials[-1], int(divisor))] * n
    concurrency = max(concurrency, n)
    out = [concurrency // n] * n
    for i in range(concurrency % n):
        out[i] += 1
    return out


class AdaptiveASHA(Searcher):
    name = "adaptive_asha"

    def __init__(self, config: SearcherConfig, hparams: dict[str, Any], seed: int) -> None:
        super().__init__(config, hparams, seed)
        self.time_metric, self.max_time = _time(config)
        self.divisor = config.divisor
        self.max_trials = required(config.max_trials, "max_trials", self.name)
        self.brackets = [Bracket(r, t, c, self.divisor, self.max_time)
                         for r, t, c in plan(config)]
        self.bracket_of: dict[int, int] = {}

    def _new(self, bracket: int) -> Create:
        create = self._create()
        self.bracket_of[create.request_id] = bracket
        self.brackets[bracket].trial_rung[create.request_id] = 0
        return create

    def initial(self) -> list[Action]:
        return [self._new(i) for i, b in enumerate(self.brackets)
                for _ in range(b.initial_count())]

    def validation(self, request_id: int, metrics: dict[str, Any]) -> list[Action]:
        if request_id not in self.bracket_of:
            return []
        i = self.bracket_of[request_id]
        b = self.brackets[i]
        if request_id in b.stopped or request_id in self.closed:
            return []  # a late report from a trial already told to stop
        units = metrics.get(self.time_metric)
        if isinstance(units, bool) or not isinstance(units, int | float):
            raise SearcherError(f"searcher time metric '{self.time_metric}' is missing or not "
                                f"a number in the validation metrics {sorted(metrics)}")
        if not b.climb(request_id, float(units), self.searcher_value(metrics)):
            return []
        b.stopped.add(request_id)
        out: list[Action] = [Stop(request_id)]
        if b.has_room():
            out.append(self._new(i))
        return out

    def exited(self, request_id: int) -> list[Action]:
        super().exited(request_id)
        i = self.bracket_of.get(request_id)
        if i is None:
            return []
        b = self.brackets[i]
        b.completed += 1
        if request_id not in b.stopped and b.has_room():
            b.stopped.add(request_id)
            return [self._new(i)]
        return []

    def exited_early(self, request_id: int, reason: ExitReason) -> list[Action]:
        super().exited_early(request_id, reason)
        i = self.bracket_of.get(request_id)
        if i is None:
            return []
        b = self.brackets[i]
        rung = b.trial_rung.get(request_id, 0)
        if reason is ExitReason.INVALID_HP:
            b.invalid += 1
            for r in range(rung + 1):
                b.metrics[r] = [(t, v) for t, v in b.metrics[r] if t != request_id]
            b.stopped.add(request_id)
            return [self._new(i)]
        b.completed += 1
        if request_id not in b.stopped:
            b.insert(rung, request_id, EXITED_METRIC)
            b.stopped.add(request_id)
            if b.has_room():
                return [self._new(i)]
        return []

    def reopen(self, request_id: int) -> None:
        """A continued trial that had ended before the searcher stopped it: its end (and the
        worst score it took in its rung) is undone, to be applied again when it ends."""
        was_closed = request_id in self.closed
        super().reopen(request_id)
        i = self.bracket_of.get(request_id)
        if i is None or not was_closed:
            return
        b = self.brackets[i]
        b.completed = max(b.completed - 1, 0)
        rung = b.trial_rung.get(request_id, 0)
        if (request_id, EXITED_METRIC) in b.metrics[rung]:
            b.metrics[rung].remove((request_id, EXITED_METRIC))
            b.stopped.discard(request_id)

    def progress(self, trial_progress: dict[int, float]) -> float:
        return sum(b.progress() for b in self.brackets) / len(self.brackets)

    def _snapshot(self) -> dict[str, Any]:
        return {"brackets": [b.to_json() for b in self.brackets],
                "bracket_of": {str(k): v for k, v in self.bracket_of.items()}}

    def _restore(self, state: dict[str, Any]) -> None:
        for b, saved in zip(self.brackets, state["brackets"], strict=True):
            b.load(saved)
        self.bracket_of = {int(k): int(v) for k, v in state["bracket_of"].items()}


class AsyncHalving(AdaptiveASHA):
    """One bracket of `num_rungs`."""

    name = "async_halving"


def plan(config: SearcherConfig) -> list[tuple[int, int, int]]:
    """The brackets of an ASHA search, longest first, as (rungs, max trials, concurrency): a
    few numbers each (the schema caps rungs and brackets), whatever `max_trials` is."""
    max_trials = required(config.max_trials, "max_trials", config.name)
    if config.name == "async_halving":
        rungs = [required(config.num_rungs, "num_rungs", config.name)]
    elif config.bracket_rungs:
        rungs = sorted(config.bracket_rungs, reverse=True)
    else:
        top = asha_top_rungs(config.max_rungs, _time(config)[1], max_trials, config.divisor)
        rungs = sorted(bracket_rungs(config.mode, top), reverse=True)
    trials = bracket_trials(max_trials, config.divisor, rungs)
    per = bracket_concurrency(config.max_concurrent_trials, config.divisor, trials)
    return list(zip(rungs, trials, per, strict=True))


def _time(config: SearcherConfig) -> tuple[str, int]:
    """(time metric, max time): `time_metric`/`max_time`, or a legacy `max_length` unit."""
    if config.time_metric and config.max_time:
        return config.time_metric, config.max_time
    if isinstance(config.max_length, Length):
        ((unit, value),) = config.max_length.as_dict().items()
        return unit, value
    raise SearcherError(f"the `{config.name}` searcher requires `max_time` and "
                        "`time_metric` to be set")
