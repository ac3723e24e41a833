"""Search sanity's texts (dettui/master/searcher/sanity.py) and a continued trial reopened in
its searcher (its progress counts it as running again, not done)."""

from __future__ import annotations

from typing import Any

from dettui.config.schema import Searcher as SearcherConfig
from dettui.master import searcher as s
from dettui.master.searcher import ExitReason, sanity
from dettui.models import ExperimentState

ASHA = {"name": "adaptive_asha", "metric": "loss", "time_metric": "batches", "max_time": 16,
        "max_trials": 4, "divisor": 4, "max_concurrent_trials": 2}


def typed(config: dict[str, Any]) -> SearcherConfig:
    return SearcherConfig.model_validate(config)


def test_what_a_validation_lacks_is_named() -> None:
    single = typed({"name": "single", "metric": "acc"})
    assert sanity.missing(single, {"acc": 0.5}) == []
    assert sanity.missing(single, {"acc": "high"}) == ["searcher.metric 'acc'"]  # not a number
    asha = typed(ASHA)
    assert sanity.missing(asha, {"loss": 0.1}) == ["searcher.time_metric 'batches'"]
    assert sanity.missing(asha, {"loss": 0.1, "batches": 4}) == []
    text = sanity.lacking(single, {f"m{i:04d}": 1 for i in range(1000)},
                          "searcher.metric 'acc'")
    assert "and 992 more" in text and len(text) < 300  # 1,000 names: a few quoted
    assert "'" + "x" * 59 + "…'" in sanity.lacking(
        single, {}, sanity.missing(typed({"name": "single", "metric": "x" * 500}), {})[0])
    assert len(sanity.cannot_rank("e" * 100_000)) < 400


def test_an_ended_experiment_without_a_best_says_so_once() -> None:
    stored = ["earlier"]
    assert sanity.shown(stored, ExperimentState.ACTIVE, None, 1, False, "acc") == stored
    assert sanity.shown(stored, ExperimentState.COMPLETED, 0.5, 1, False, "acc") == stored
    ended = sanity.shown(stored, ExperimentState.COMPLETED, None, 1, False, "acc")
    assert ended == ["earlier", sanity.never_reported("acc")]
    assert sanity.shown([], ExperimentState.COMPLETED, None, 1, True, "acc") == []  # detached
    assert sanity.added(["a"], "a") is None and sanity.added(["a"], "b") == ["a", "b"]
    assert sanity.added([str(i) for i in range(sanity.MAX_WARNINGS)], "b") is None
    # trials that failed (or a cancel) reported no validation: nothing said of validations
    assert sanity.shown([], ExperimentState.ERROR, None, 1, False, "acc") == []
    assert sanity.shown([], ExperimentState.CANCELED, None, 1, False, "acc") == []
    # validations that lacked the metric said so already: not said twice in other words
    lacked = [sanity.lacking(typed({"name": "single", "metric": "acc"}), {"loss": 1},
                             "searcher.metric 'acc'")]
    assert sanity.shown(lacked, ExperimentState.COMPLETED, None, 1, False, "acc") == lacked


def test_a_reopened_trial_is_open_again_and_its_end_counts_once() -> None:
    random = s.build(typed({"name": "random", "metric": "loss", "max_trials": 2}),
                     {}, 0)
    random.initial()
    random.exited_early(0, ExitReason.ERRORED)
    assert random.progress({}) == 0.5
    random.reopen(0)
    assert random.progress({0: 0.25}) == 0.125
    asha = s.build(typed(ASHA), {}, 0)
    first = [a.request_id for a in asha.initial() if isinstance(a, s.Create)]
    asha.exited_early(first[0], ExitReason.ERRORED)
    bracket = asha.brackets[asha.bracket_of[first[0]]]
    before = bracket.to_json()
    asha.reopen(first[0])
    assert bracket.completed == before["completed"] - 1
    assert first[0] not in bracket.stopped and first[0] not in asha.closed
    assert all(rid != first[0] for row in bracket.metrics for rid, _ in row)
