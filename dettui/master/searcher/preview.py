"""`det preview-search`: how many trials a searcher would create and how long each trains,
computed as Determined's `searcher.Simulate` does (no metrics: ASHA's planned stops by rung)."""

from __future__ import annotations

from typing import Any

from dettui.config import hyperparameters as hp
from dettui.config.schema import Searcher as SearcherConfig
from dettui.master.searcher.asha import AdaptiveASHA, AsyncHalving, _time
from dettui.master.searcher.base import SearcherError

TrialSummary = dict[str, Any]  # {"count": n, "unit": {"maxLength": bool, "name"?, "value"?}}
TO_COMPLETION = {"maxLength": True}


def simulate(config: SearcherConfig, hparams: dict[str, Any]) -> list[TrialSummary]:
    """The trials the search plans: (count, length) rows, shortest first for ASHA."""
    name = config.name
    if name == "single":
        return [{"count": 1, "unit": TO_COMPLETION}]
    if name == "random":
        if config.max_trials is None:
            raise SearcherError("searcher.max_trials: is required by the random searcher")
        return [{"count": config.max_trials, "unit": TO_COMPLETION}]
    if name == "grid":
        return [{"count": hp.grid_size(hparams), "unit": TO_COMPLETION}]
    if name in ("adaptive_asha", "async_halving"):
        return _asha(config, hparams)
    raise SearcherError(f"searcher.name: unknown searcher '{name}'")


def _asha(config: SearcherConfig, hparams: dict[str, Any]) -> list[TrialSummary]:
    kind = AdaptiveASHA if config.name == "adaptive_asha" else AsyncHalving
    search = kind(config, hparams, 0)
    unit, _ = _time(config)
    per_length: dict[int, int] = {}
    for bracket in search.brackets:
        left = bracket.max_trials
        for i, units in enumerate(bracket.units):
            going_on = max(int(left / bracket.divisor), 1)
            stopped = left if i == len(bracket.units) - 1 else left - going_on
            per_length[units] = per_length.get(units, 0) + stopped
            left = going_on
    return [{"count": n, "unit": {"maxLength": False, "name": unit, "value": units}}
            for units, n in sorted(per_length.items())]
