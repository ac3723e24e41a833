"""Summary metrics fold report by report as Determined's calculateNewSummaryMetrics; features
dettui does not offer are named in one sentence."""

from __future__ import annotations

import math

import pytest

from dettui.errors import Unimplemented
from dettui.master import summary
from dettui.master.http import unsupported


def test_summary_metrics_fold_like_determined() -> None:
    got = summary.summarize([
        ("training", {"loss": 2.0, "tag": "a"}),
        ("validation", {"acc": 0.5}),
        ("training", {"loss": 1.0, "tag": 3}),  # a type change makes the metric a string
        ("training", {"loss": math.nan}),
        ("custom", {"when": "2026-01-01T00:00:00Z"}),
    ])
    assert got is not None
    loss = got["avg_metrics"]["loss"]
    assert loss["type"] == "number" and loss["count"] == 3 and loss["min"] == 1.0
    assert loss["max"] == 2.0 and loss["sum"] == "NaN" and loss["last"] == "NaN"
    assert got["avg_metrics"]["tag"] == {"type": "string", "last": None}
    assert got["validation_metrics"]["acc"] == {"type": "number", "min": 0.5, "max": 0.5,
                                                "sum": 0.5, "mean": 0.5, "count": 1,
                                                "last": 0.5}
    assert got["custom"]["when"]["type"] == "date"
    assert summary.summarize([]) is None


@pytest.mark.parametrize(("path", "sentence"), [
    ("/api/v1/models", "the model registry is not supported by dettui"),
    ("/api/v1/workspaces/1/projects", "workspaces and projects are not supported by dettui"),
    ("/api/v1/groups/search", "user groups are not supported by dettui"),
    ("/api/v1/permissions/summary", "RBAC is not supported by dettui"),
    ("/api/v1/tensorboards", "TensorBoard instances are not supported by dettui"),
])
def test_unsupported_features_answer_one_sentence(path: str, sentence: str) -> None:
    with pytest.raises(Unimplemented, match=sentence) as err:
        unsupported.check(path)
    assert err.value.http_status == 501 and ": " in err.value.message


def test_supported_paths_pass() -> None:
    for path in ("/api/v1/experiments", "/api/v1/modelsx", "/info", "/checkpoints/x"):
        assert unsupported.check(path) is None, path  # no Unimplemented raised
