"""What the queue calls things, in the dashboard and in `dettui job list` (issue 12): a
stopping experiment's job is STOPPING_CANCELED, not SCHEDULED; a paused one's PAUSED, not
QUEUED; and counts agree with their noun ("1 job", "2 jobs")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from dettui.commands import cluster
from dettui.screens import queue
from dettui.screens.base import counted
from dettui.widgets.rowtable import RowTable


def _job(queued: str, experiment: str | None, reason: str = "") -> dict[str, Any]:
    job: dict[str, Any] = {"summary": {"state": queued}}
    if experiment is not None:
        job["experimentState"] = experiment
    if reason:
        job["unschedulableReason"] = reason
    return job


@pytest.mark.parametrize(("job", "said"), [
    (_job("STATE_SCHEDULED", "STATE_STOPPING_CANCELED"), "STOPPING_CANCELED"),
    (_job("STATE_SCHEDULED", "STATE_STOPPING_KILLED"), "STOPPING_KILLED"),
    (_job("STATE_QUEUED", "STATE_PAUSED"), "PAUSED"),
    (_job("STATE_SCHEDULED", "STATE_ACTIVE"), "SCHEDULED"),
    (_job("STATE_QUEUED", "STATE_ACTIVE", "no pool gpu"), "QUEUED (no pool gpu)"),
    (_job("STATE_QUEUED", None), "QUEUED"),  # not an experiment's job
], ids=["stopping-canceled", "stopping-killed", "paused", "scheduled", "unschedulable",
        "no-experiment"])
def test_a_jobs_state_says_what_its_experiment_does(job: dict[str, Any], said: str) -> None:
    """In the same plain words in the dashboard and in `dettui job list` (the wire, and so
    `det job list`, keeps Determined's STATE_ names)."""
    assert queue.job_state(job) == said
    assert cluster.job_state(job) == said


@pytest.mark.parametrize(("shown", "total", "noun", "text"), [
    (0, 0, "job", "0 jobs"), (1, 1, "job", "1 job"), (2, 2, "job", "2 jobs"),
    (1, 2, "job", "1 of 2 jobs"), (0, 1, "job", "0 of 1 job"), (1, 1, "experiment",
                                                                 "1 experiment"),
    (3, 3, "", "3"),
])
def test_a_count_agrees_with_its_noun(shown: int, total: int, noun: str, text: str) -> None:
    table = cast(RowTable, SimpleNamespace(row_count=shown, total_count=total))
    assert counted(table, noun) == text
