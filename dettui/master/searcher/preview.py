"""`det preview-search`: how many trials a searcher would create and how long each trains,
computed as Determined's `searcher.Simulate` does (no metrics: ASHA's planned stops by rung)."""

from __future__ import annotations

from typing import Any

from dettui.config import hyperparameters as hp
from dettui.config.schema import Searcher as SearcherConfig
from dettui.master.searcher.asha import _time, plan, rung_units
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
        return _asha(config)
    raise SearcherError(f"searcher.name: unknown searcher '{name}'")


def _asha(config: SearcherConfig) -> list[TrialSummary]:
    """From the bracket plan alone (rungs × brackets numbers, which the schema caps): no
    searcher is built and nothing is kept per trial, however large `max_trials` is."""
    unit, max_time = _time(config)
    per_length: dict[int, int] = {}
    for rungs, max_trials, _ in plan(config):
        left = max_trials
        units_by_rung = rung_units(rungs, config.divisor, max_time)
        for i, units in enumerate(units_by_rung):
            going_on = max(int(left / config.divisor), 1)
            stopped = left if i == len(units_by_rung) - 1 else left - going_on
            per_length[units] = per_length.get(units, 0) + stopped
            left = going_on
    return [{"count": n, "unit": {"maxLength": False, "name": unit, "value": units}}
            for units, n in sorted(per_length.items())]
