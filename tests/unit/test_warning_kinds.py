"""An experiment keeps one warning per kind (dettui/master/searcher/sanity.py; issue 31 review,
finding 7): a trial varying its metric names replaces its own warning, counted, and cannot
crowd out the others; a trial that failed for good is one warning too, naming its exit."""

from __future__ import annotations

from dettui.config.schema import Searcher as SearcherConfig
from dettui.master.searcher import sanity

SINGLE = SearcherConfig.model_validate({"name": "single", "metric": "acc"})
ASHA = SearcherConfig.model_validate({"name": "adaptive_asha", "metric": "loss",
                                      "time_metric": "batches", "max_time": 16,
                                      "max_trials": 4})


def test_varying_metric_names_leave_one_counted_warning_per_kind() -> None:
    warnings: list[str] = [sanity.trial_failed(3, 2, "error", "boom", 0)]
    for i in range(50):
        for what in sanity.missing(ASHA, {f"m{i}": 1.0}):
            now = sanity.added(warnings, sanity.lacking(ASHA, {f"m{i}": 1.0}, what, warnings))
            warnings = now if now is not None else warnings
    now = sanity.added(warnings, sanity.cannot_rank("no metric"))
    assert now is not None
    warnings = now
    assert len(warnings) == 4, warnings  # the failure, two kinds of lack, the stop
    assert warnings[0] == "trial 3 exited with code 2 (boom)"
    assert warnings[1].startswith("validation metrics lack searcher.metric 'loss' "
                                  "(50 validations, the latest reported: m49)")
    assert warnings[2].startswith("validation metrics lack searcher.time_metric 'batches' "
                                  "(50 validations, the latest reported: m49)")
    assert warnings[3].startswith("the adaptive search cannot rank trials")


def test_a_failed_trial_says_its_exit_and_last_line() -> None:
    assert sanity.trial_failed(3, 2, "error", "sh: cd: can't cd to sub", 1) == (
        "trial 3 exited with code 2 (sh: cd: can't cd to sub) after 1 restart")
    assert sanity.trial_failed(4, None, "spawn_failed", "", 0) == "trial 4 ended: spawn_failed"
    first = [sanity.trial_failed(3, 2, "error", "a", 0)]
    second = sanity.added(first, sanity.trial_failed(5, 1, "error", "\x1b[2Jb", 2, first))
    assert second == ["2 trials failed; the latest: trial 5 exited with code 1 (?[2Jb) "
                      "after 2 restarts"]
    third = sanity.trial_failed(6, 1, "error", "c" * 10_000, 0, second)
    assert third.startswith("3 trials failed; the latest: trial 6") and len(third) < 400
