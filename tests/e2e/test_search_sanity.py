"""Search sanity through `dettui serve` (issue 31, item 1): a search whose validations lack
what its searcher reads says so where the user looks. A `searcher.metric` never reported: a
warning in the trial's logs (once), on the experiment (`e describe`, a marker in `e list`, the
JSON the dashboard reads), once, counting the validations, and `e download`
says it takes the newest checkpoint, ranked by nothing. An adaptive search without its
`time_metric`: as Determined's master, the experiment stops in ERROR, and says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_search import created
from tests.e2e.test_single import write_ctx

pytestmark = pytest.mark.slow

REPORTS = """
from dettui import core

with core.init() as ctx:
    for step in (1, 2):
        ctx.train.report_validation_metrics(steps_completed=step,
                                            metrics={"val_loss": 1.0 / step})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
            (path / "w").write_text(str(step))
"""


def test_a_searcher_metric_never_reported_is_said_everywhere(served: Served,
                                                               tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: wrong-metric
        entrypoint: python3 train.py
        searcher: {name: single, metric: val_acc, smaller_is_better: false}
        max_restarts: 0
        """, {"train.py": REPORTS})
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(exp_id)
    assert exp["state"] == "STATE_COMPLETED"
    warnings = exp["warnings"]
    # one warning: the ended experiment's "no validation reported ..." would say it again
    assert len(warnings) == 1 and "lack searcher.metric 'val_acc' (2 validations, the latest "\
        "reported: val_loss)" in warnings[0], warnings
    trial_id = served.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"]["trialIds"][0]
    logs = served.cli("t", "logs", str(trial_id)).stdout
    assert logs.count("lack searcher.metric 'val_acc'") == 1, logs  # two reports, one line
    described = served.cli("e", "describe", str(exp_id)).stdout
    assert "warning: validation metrics lack searcher.metric 'val_acc'" in described
    assert "no trial is ranked" in described
    listed = served.cli("e", "list").stdout
    assert "! COMPL" in listed, listed  # (a narrow table may cut the state's end)
    best = served.cli("checkpoint", "list", str(exp_id), "--best", "1")
    assert "searcher metric 'val_acc': none is best" in best.stderr
    got = served.cli("e", "download", str(exp_id), "-o", str(tmp_path / "dl"))
    assert "searcher metric 'val_acc': none is best; downloading the newest" in got.stderr
    newest = served.api("GET", f"/api/v1/experiments/{exp_id}/checkpoints"
                        "?orderBy=ORDER_BY_DESC")["checkpoints"][0]
    assert newest["uuid"] in got.stdout and newest["metadata"]["steps_completed"] == 2


def test_an_adaptive_search_without_its_time_metric_errors_saying_why(
        served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: no-time-metric
        entrypoint: python3 train.py
        searcher: {name: adaptive_asha, metric: val_loss, time_metric: batches, max_time: 4,
                   max_trials: 2, max_concurrent_trials: 1}
        max_restarts: 0
        """, {"train.py": REPORTS})
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(exp_id)
    assert exp["state"] == "STATE_ERROR", exp  # as Determined's master: it cannot rank
    assert any("the adaptive search cannot rank trials and stopped the experiment" in w
               and "time metric 'batches'" in w for w in exp["warnings"]), exp["warnings"]
    described = served.cli("e", "describe", str(exp_id)).stdout
    assert "the adaptive search cannot rank trials" in described
    first = min(exp["trialIds"]) if exp["trialIds"] else None
    assert first is not None
    logs = served.cli("t", "logs", str(first)).stdout
    assert "lack searcher.time_metric 'batches'" in logs
    assert "ERROR: the adaptive search cannot rank trials" in logs


def test_a_search_that_reports_its_metric_has_no_warning(served: Served,
                                                         tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: right-metric
        entrypoint: python3 train.py
        searcher: {name: single, metric: val_loss}
        max_restarts: 0
        """, {"train.py": REPORTS})
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(exp_id)
    assert exp["state"] == "STATE_COMPLETED" and exp["warnings"] == []
    assert "warning" not in served.cli("e", "describe", str(exp_id)).stdout
