"""Searchers: pure state machines from validations and exits to trials created and stopped."""

from __future__ import annotations

from typing import Any

from dettui.config.schema import ExperimentSchema
from dettui.config.schema import Searcher as SearcherConfig
from dettui.master.searcher.asha import AdaptiveASHA, AsyncHalving
from dettui.master.searcher.base import (
    Action,
    Create,
    ExitReason,
    Searcher,
    SearcherError,
    Stop,
)
from dettui.master.searcher.basic import GridSearch, RandomSearch, SingleSearch

KINDS: dict[str, type[Searcher]] = {
    "single": SingleSearch, "random": RandomSearch, "grid": GridSearch,
    "adaptive_asha": AdaptiveASHA, "async_halving": AsyncHalving,
}


def build(config: SearcherConfig, hparams: dict[str, Any], seed: int,
          state: dict[str, Any] | None = None) -> Searcher:
    """A searcher for the experiment's typed `searcher` config, restored from `state` if
    given."""
    kind = KINDS.get(config.name)
    if kind is None:
        raise SearcherError(f"searcher.name: unknown searcher '{config.name}'")
    searcher = kind(config, hparams, seed)
    if state is not None:
        searcher.restore(state)
    return searcher


def for_experiment(conf: ExperimentSchema, state: dict[str, Any] | None = None) -> Searcher:
    """The searcher of an experiment's config: its searcher section, its hyperparameters, and
    its seed (`reproducibility.experiment_seed`, 0 when unset)."""
    return build(conf.searcher, conf.hyperparameters,
                 conf.reproducibility.experiment_seed or 0, state)


__all__ = ["Action", "Create", "ExitReason", "KINDS", "Searcher", "SearcherError", "Stop",
           "build", "for_experiment"]
