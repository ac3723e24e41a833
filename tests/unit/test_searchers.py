"""Searcher tables: given events, exactly which trials are created and stopped (SEMANTICS §6)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dettui.config import hyperparameters as hp
from dettui.config.schema import ExperimentSchema
from dettui.config.schema import Searcher as SearcherConfig
from dettui.master import searcher as s
from dettui.master.searcher import Create, ExitReason, Stop
from dettui.master.searcher.asha import (
    bracket_concurrency,
    bracket_rungs,
    bracket_trials,
    max_rungs_for,
)

HPS = hp.normalize({"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3},
                    "width": {"type": "int", "minval": 8, "maxval": 64, "count": 2},
                    "act": "relu"})


def typed(config: dict[str, Any]) -> SearcherConfig:
    """A `searcher` section as the schema's model (its defaults filled in)."""
    return SearcherConfig.model_validate(config)


def creates(actions: list[s.Action]) -> list[int]:
    return [a.request_id for a in actions if isinstance(a, Create)]


def stops(actions: list[s.Action]) -> list[int]:
    return [a.request_id for a in actions if isinstance(a, Stop)]


# -- grid -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "axis"), [
    ({"type": "int", "minval": 1, "maxval": 10, "count": 4}, [1, 4, 7, 10]),
    ({"type": "int", "minval": 1, "maxval": 3, "count": 10}, [1, 2, 3]),  # clamped to the range
    ({"type": "int", "minval": 1, "maxval": 2, "count": 1}, [2]),  # 1.5 rounds away from zero
    ({"type": "double", "minval": 0, "maxval": 1, "count": 3}, [0.0, 0.5, 1.0]),
    ({"type": "double", "minval": 0, "maxval": 1, "count": 1}, [0.5]),
    ({"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3}, [1e-3, 1e-2, 1e-1]),
    ({"type": "categorical", "vals": ["a", "b"]}, ["a", "b"]),
    ({"type": "const", "val": 7}, [7]),
])
def test_grid_axes_follow_determined(spec: dict, axis: list) -> None:
    assert hp.grid_axis(spec) == pytest.approx(axis)


def test_grid_is_the_cartesian_product_with_nested_groups() -> None:
    hps = hp.normalize({"b": {"type": "categorical", "vals": [1, 2]},
                        "a": {"inner": {"type": "int", "minval": 0, "maxval": 2, "count": 3}}})
    assert hp.grid(hps) == [{"a": {"inner": 0}, "b": 1}, {"a": {"inner": 0}, "b": 2},
                            {"a": {"inner": 1}, "b": 1}, {"a": {"inner": 1}, "b": 2},
                            {"a": {"inner": 2}, "b": 1}, {"a": {"inner": 2}, "b": 2}]


def test_grid_searcher_runs_every_point_once_within_concurrency() -> None:
    g = s.build(typed({"name": "grid", "metric": "loss", "max_concurrent_trials": 2}), HPS,
                seed=1)
    first = g.initial()
    assert creates(first) == [0, 1]
    seen = [a.hparams for a in first if isinstance(a, Create)]
    done = 0
    while g.open_trials():
        rid = g.open_trials()[0]
        more = g.exited(rid)
        done += 1
        seen += [a.hparams for a in more if isinstance(a, Create)]
        assert len(g.open_trials()) <= 2
    assert done == 6 and len(seen) == 6
    assert sorted((round(p["lr"], 6), p["width"], p["act"]) for p in seen) == [
        (lr, w, "relu") for lr in (0.001, 0.01, 0.1) for w in (8, 64)]
    assert g.progress({}) == 1.0


# -- random / single --------------------------------------------------------------------------

def test_random_refills_to_max_trials_and_replaces_invalid_hparams() -> None:
    r = s.build(typed({"name": "random", "metric": "loss", "max_trials": 4,
                 "max_concurrent_trials": 2}), HPS, seed=7)
    assert creates(r.initial()) == [0, 1]
    assert creates(r.exited_early(0, ExitReason.INVALID_HP)) == [2], "a replacement"
    assert creates(r.exited(1)) == [3]
    assert creates(r.exited_early(2, ExitReason.ERRORED)) == [4]
    assert creates(r.exited(3)) == [], "4 valid trials were created"
    assert creates(r.exited(4)) == [] and r.open_trials() == []
    assert r.progress({}) == 1.0


def test_samples_are_reproducible_from_the_experiment_seed() -> None:
    def draws(seed: int) -> list[tuple]:
        r = s.build(typed({"name": "random", "metric": "x", "max_trials": 3}), HPS, seed=seed)
        return [(a.hparams["lr"], a.hparams["width"], a.seed) for a in r.initial()]

    assert draws(3) == draws(3) and draws(3) != draws(4)
    assert len({seed for *_, seed in draws(3)}) == 3, "each trial its own seed"
    single = s.build(typed({"name": "single", "metric": "x"}), HPS, seed=3).initial()
    assert len(single) == 1 and single[0].hparams == hp.sample_single(HPS, 3)


# -- ASHA setup --------------------------------------------------------------------------------

def test_asha_brackets_trials_and_concurrency() -> None:
    assert max_rungs_for(5, max_time=64, max_trials=16, divisor=4) == 3
    assert max_rungs_for(5, max_time=64, max_trials=1000, divisor=4) == 4  # log4 64 is exact
    assert bracket_rungs("standard", 3) == [2, 3]
    assert bracket_rungs("aggressive", 3) == [3]
    assert bracket_rungs("conservative", 3) == [1, 2, 3]
    assert bracket_trials(16, 4, [3, 2]) == [12, 4]
    assert bracket_concurrency(16, 4, [12, 4]) == [8, 8]
    assert bracket_concurrency(3, 4, [12, 4]) == [2, 1]
    assert bracket_concurrency(0, 4, [12, 4]) == [4, 4]
    a = s.build(typed({"name": "adaptive_asha", "metric": "loss", "max_trials": 16,
                       "max_time": 64, "time_metric": "batches"}), HPS, seed=0)
    assert [b.num_rungs for b in a.brackets] == [3, 2]
    assert [b.units for b in a.brackets] == [[4, 16, 64], [16, 64]]
    assert creates(a.initial()) == list(range(12))  # min(8, 12) + min(8, 4)


def test_asha_needs_a_time_metric() -> None:
    with pytest.raises(s.SearcherError, match="requires `max_time` and `time_metric`"):
        s.build(typed({"name": "adaptive_asha", "metric": "loss", "max_trials": 4}), HPS,
                seed=0)


# -- ASHA rungs --------------------------------------------------------------------------------

def halving(**extra: object) -> s.Searcher:
    config = {"name": "async_halving", "metric": "loss", "num_rungs": 2, "divisor": 2,
              "max_time": 8, "time_metric": "batches", "max_trials": 4,
              "max_concurrent_trials": 2, **extra}
    return s.build(typed(config), HPS, seed=0)


def test_rung_promotions_and_stops() -> None:
    h = halving()
    assert creates(h.initial()) == [0, 1]
    # Trial 0 enters rung 0 first: the best of one continues; rung 1 needs 8 batches.
    assert h.validation(0, {"batches": 4, "loss": 0.5}) == []
    # Trial 1 is second of two in rung 0: max(⌊2/2⌋, 1) = 1 continue, so it stops.
    acts = h.validation(1, {"batches": 4, "loss": 0.7})
    assert stops(acts) == [1] and creates(acts) == [2]
    # Trial 0 reaches the top rung: stopped (done), and a new trial takes its place.
    acts = h.validation(0, {"batches": 8, "loss": 0.4})
    assert stops(acts) == [0] and creates(acts) == [3]
    # Trial 2 ranks 1 of 3 in rung 0 (0.5, 0.6, 0.7): ⌊3/2⌋ = 1 continue → stop; no trials left.
    acts = h.validation(2, {"batches": 4, "loss": 0.6})
    assert stops(acts) == [2] and creates(acts) == []
    # Trial 3 reports after 8 batches: it climbs rung 0 (best of 4) and stops at the top.
    assert stops(h.validation(3, {"batches": 8, "loss": 0.1})) == [3]
    b = h.brackets[0]  # type: ignore[attr-defined]
    assert [r for r, _ in b.metrics[0]] == [3, 0, 2, 1]
    assert [r for r, _ in b.metrics[1]] == [3, 0]
    # A late report from a stopped trial changes nothing.
    assert h.validation(1, {"batches": 8, "loss": 0.0}) == []


def test_equal_metrics_insert_before_equals_and_larger_is_better_negates() -> None:
    h = halving(smaller_is_better=False, max_concurrent_trials=3)
    h.initial()
    h.validation(0, {"batches": 4, "loss": 0.9})
    acts = h.validation(1, {"batches": 4, "loss": 0.9})  # equal: inserted first → continues
    assert stops(acts) == []
    assert [r for r, _ in h.brackets[0].metrics[0]] == [1, 0]  # type: ignore[attr-defined]
    acts = h.validation(2, {"batches": 4, "loss": 0.1})
    assert stops(acts) == [2], "0.1 is the worst when larger is better"


def test_invalid_hparams_leave_the_rungs_and_are_replaced() -> None:
    h = halving()
    h.initial()
    h.validation(0, {"batches": 4, "loss": 0.5})
    acts = h.exited_early(0, ExitReason.INVALID_HP)
    assert creates(acts) == [2]
    assert h.brackets[0].metrics[0] == []  # type: ignore[attr-defined]
    # An errored trial scores the worst value in its rung and is replaced while there is room.
    acts = h.exited_early(1, ExitReason.ERRORED)
    assert creates(acts) == [3]
    assert h.brackets[0].metrics[0] == [(1, sys.float_info.max)]  # type: ignore[attr-defined]


def test_a_trial_that_ends_unstopped_makes_room() -> None:
    h = halving()
    h.initial()
    assert creates(h.exited(0)) == [2]
    h.validation(1, {"batches": 8, "loss": 0.3})  # top rung: stop + create 3
    assert creates(h.exited(1)) == [], "its replacement was created when it was stopped"


def test_missing_metrics_are_errors() -> None:
    h = halving()
    h.initial()
    with pytest.raises(s.SearcherError, match="time metric 'batches'"):
        h.validation(0, {"loss": 0.5})
    with pytest.raises(s.SearcherError, match="searcher metric 'loss'"):
        h.validation(0, {"batches": 4, "loss": "n/a"})


def test_a_restored_searcher_continues_exactly_like_the_original() -> None:
    config = {"name": "adaptive_asha", "metric": "loss", "max_trials": 20, "max_time": 16,
              "time_metric": "batches", "divisor": 2, "max_concurrent_trials": 4}
    a = s.build(typed(config), HPS, seed=11)
    a.initial()
    a.validation(0, {"batches": 4, "loss": 0.3})
    a.validation(1, {"batches": 4, "loss": 0.4})
    saved = json.loads(json.dumps(a.snapshot()))
    b = s.build(typed(config), HPS, seed=11, state=saved)
    for searcher in (a, b):
        searcher.events = [  # type: ignore[attr-defined]
            searcher.validation(2, {"batches": 4, "loss": 0.9}),
            searcher.exited_early(3, ExitReason.ERRORED),
            searcher.validation(0, {"batches": 16, "loss": 0.1}),
        ]
    assert a.events == b.events  # type: ignore[attr-defined]
    assert a.snapshot() == b.snapshot()


# -- the config: the schema's model and its defaults ---------------------------------------

DEFAULT = {name: f.default for name, f in SearcherConfig.model_fields.items()}


def test_defaults_are_the_schemas() -> None:
    """A searcher reads its settings from the typed config: what the schema defaults is what
    it runs with, with no default of its own."""
    r = s.build(typed({"name": "random", "metric": "x", "max_trials": 40}), HPS, seed=0)
    assert r.concurrency == DEFAULT["max_concurrent_trials"]  # type: ignore[attr-defined]
    a = s.build(typed({"name": "adaptive_asha", "metric": "x", "max_trials": 1000,
                       "max_time": 10**6, "time_metric": "batches"}), HPS, seed=0)
    assert a.divisor == DEFAULT["divisor"]  # type: ignore[attr-defined]
    rungs = [b.num_rungs for b in a.brackets]  # type: ignore[attr-defined]
    assert rungs == sorted(bracket_rungs(DEFAULT["mode"], DEFAULT["max_rungs"]), reverse=True)
    per = [b.concurrency for b in a.brackets]  # type: ignore[attr-defined]
    assert sum(per) == DEFAULT["max_concurrent_trials"]


@pytest.mark.parametrize(("config", "key"), [
    ({"name": "random", "metric": "x"}, "max_trials"),
    ({"name": "adaptive_asha", "metric": "x", "max_time": 8, "time_metric": "b"}, "max_trials"),
    ({"name": "async_halving", "metric": "x", "max_trials": 4, "max_time": 8,
      "time_metric": "b"}, "num_rungs"),
])
def test_a_setting_the_schema_leaves_unset_is_required_not_defaulted(
        config: dict[str, Any], key: str) -> None:
    with pytest.raises(s.SearcherError, match=f"searcher.{key}: is required by the"):
        s.build(typed(config), HPS, seed=0)


STATES = json.loads((Path(__file__).parent / "searcher_states.json").read_text())


def _event(searcher: s.Searcher, event: list[Any]) -> list[s.Action]:
    kind, *args = event
    if kind == "validation":
        return searcher.validation(*args)
    if kind == "exited":
        return searcher.exited(*args)
    return searcher.exited_early(args[0], ExitReason(args[1]))


def _encoded(actions: list[s.Action]) -> list[list[Any]]:
    return [["create", a.request_id, a.hparams, a.seed] if isinstance(a, Create)
            else ["stop", a.request_id] for a in actions]


@pytest.mark.parametrize("name", sorted(STATES))
def test_states_stored_before_typed_configs_replay_the_same(name: str) -> None:
    """Each entry: a stored full config and a searcher state saved mid-search by the searchers
    that read raw config dicts (commit 3858892), then the next events and exactly what those
    searchers answered. Restored from the typed config, a searcher answers the same."""
    saved = STATES[name]
    conf = ExperimentSchema.model_validate({
        "searcher": saved["searcher"], "hyperparameters": saved["hyperparameters"],
        "reproducibility": {"experiment_seed": saved["seed"]}})
    searcher = s.for_experiment(conf, saved["state"])
    answers = [_encoded(_event(searcher, event)) for event in saved["events"]]
    assert answers == saved["actions"]
    snapshot = json.loads(json.dumps(searcher.snapshot()))
    snapshot.pop("rng")
    assert snapshot == saved["snapshot"]
