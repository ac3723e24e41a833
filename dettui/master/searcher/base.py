"""What every searcher shares: its actions, the events it takes, and its saved state.

A searcher is a pure state machine: events in (trial created, validation reported, trial
exited), actions out (create a trial, stop a trial). It reads no clock and does no I/O; its
whole state is a JSON-able dict, saved with the trials it creates so a master restart goes on
exactly where it was. Randomness comes from one seeded generator whose state is saved too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from dettui import metric
from dettui.config import hyperparameters as hp
from dettui.config.schema import Searcher as SearcherConfig

T = TypeVar("T")


class SearcherError(ValueError):
    """A validation the searcher cannot use (the metric is missing or not a number), or a
    config it cannot run."""


def required(value: T | None, key: str, name: str) -> T:
    """A setting the schema leaves unset by default but the `name` searcher needs."""
    if value is None:
        raise SearcherError(f"searcher.{key}: is required by the {name} searcher")
    return value


@dataclass(frozen=True)
class Create:
    request_id: int
    hparams: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class Stop:
    request_id: int


Action = Create | Stop


class ExitReason(Enum):
    """Why a trial ended before the searcher closed it."""

    INVALID_HP = "invalid_hp"
    ERRORED = "errored"
    CANCELED = "canceled"


class Searcher:
    """Base: request ids, the random generator, and which trials are open or closed."""

    name = "base"

    def __init__(self, config: SearcherConfig, hparams: dict[str, Any], seed: int) -> None:
        """`config` is the typed `searcher` section: its defaults are the schema's."""
        self.config = config
        self.hparams = hparams
        self.metric = config.metric
        self.smaller_is_better = config.smaller_is_better
        self.rng = random.Random(seed)
        self.next_id = 0
        self.created: list[int] = []
        self.closed: set[int] = set()
        self.invalid: set[int] = set()

    # -- events (override) ------------------------------------------------------------------

    def initial(self) -> list[Action]:
        raise NotImplementedError

    def validation(self, request_id: int, metrics: dict[str, Any]) -> list[Action]:
        return []

    def exited(self, request_id: int) -> list[Action]:
        """The trial ended on its own or after a Stop (COMPLETED)."""
        self.closed.add(request_id)
        return []

    def exited_early(self, request_id: int, reason: ExitReason) -> list[Action]:
        self.closed.add(request_id)
        if reason is ExitReason.INVALID_HP:
            self.invalid.add(request_id)
        return []

    def reopen(self, request_id: int) -> None:
        """The trial runs again (its experiment was continued): open, as before it ended."""
        self.closed.discard(request_id)

    def progress(self, trial_progress: dict[int, float]) -> float:
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------

    def _create(self, hparams: dict[str, Any] | None = None) -> Create:
        request_id = self.next_id
        self.next_id += 1
        params = hp.sample(self.hparams, self.rng) if hparams is None else hparams
        seed = self.rng.randrange(2**31)
        self.created.append(request_id)
        return Create(request_id, params, seed)

    def open_trials(self) -> list[int]:
        return [r for r in self.created if r not in self.closed]

    def searcher_value(self, metrics: dict[str, Any]) -> float:
        """The metric as a score where smaller is better (`dettui.metric`: NaN is worst)."""
        value = metric.number(metrics, self.metric)
        if value is None:
            raise SearcherError(f"searcher metric '{self.metric}' is missing or not a number "
                                f"in the validation metrics {sorted(metrics)}")
        return metric.score(value, self.smaller_is_better)

    # -- state ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {"name": self.name, "rng": [version, list(internal), gauss],
                "next_id": self.next_id, "created": list(self.created),
                "closed": sorted(self.closed), "invalid": sorted(self.invalid),
                **self._snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.next_id = int(state["next_id"])
        self.created = [int(r) for r in state["created"]]
        self.closed = {int(r) for r in state["closed"]}
        self.invalid = {int(r) for r in state["invalid"]}
        self._restore(state)

    def _snapshot(self) -> dict[str, Any]:
        return {}

    def _restore(self, state: dict[str, Any]) -> None:
        pass
