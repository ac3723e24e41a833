"""Searchers: pure state machines from validations and exits to trials created and stopped."""

from __future__ import annotations

from typing import Any

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


def build(config: dict[str, Any], hparams: dict[str, Any], seed: int,
          state: dict[str, Any] | None = None) -> Searcher:
    """A searcher for the experiment's `searcher` config, restored from `state` if given."""
    name = str(config.get("name"))
    kind = KINDS.get(name)
    if kind is None:
        raise SearcherError(f"searcher.name: unknown searcher '{name}'")
    searcher = kind(config, hparams, seed)
    if state is not None:
        searcher.restore(state)
    return searcher


__all__ = ["Action", "Create", "ExitReason", "KINDS", "Searcher", "SearcherError", "Stop",
           "build"]
