"""`dettui job list` says each job's reason whole (issue 33, fix round Z2): in an 80-column
terminal the Why waiting column keeps ~20 characters, so the reasons it cuts are said whole
under the table, once each, with the jobs they are said of; at 200 columns the table holds
them and nothing is added."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from dettui.commands import cluster, output

NEVER = ("can never start here: needs 4 slots on one agent or on whole agents; the largest "
         "agent in pool default has 3, and 4 is not a multiple of 3")
FULL = "pool default full: 3 of 3 slots in use"


def _job(i: int, why: str | None, state: str = "STATE_QUEUED") -> dict[str, Any]:
    return {"summary": {"jobsAhead": i - 1, "state": state}, "name": f"exp-{i}",
            "entityId": str(i), "type": "TYPE_EXPERIMENT", "jobId": f"{i:08d}-aaaa-bbbb",
            "priority": 42, "weight": 1, "submissionTime": "2026-11-27T16:00:18Z",
            "allocatedSlots": 0, "requestedSlots": 4, "experimentState": "STATE_ACTIVE",
            "username": "determined", "waitReason": why}


class Master:
    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.listed = jobs

    async def pools(self) -> list[dict[str, Any]]:
        return [{"name": "default", "defaultComputePool": True,
                 "schedulerType": "SCHEDULER_TYPE_PRIORITY"}]

    async def jobs(self, pool: str | None = None) -> list[dict[str, Any]]:
        return self.listed


def job_list(monkeypatch: pytest.MonkeyPatch, width: int, jobs: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=width, highlight=False,
                                                   soft_wrap=False, markup=False))
    asyncio.run(cluster.job_list(Master(jobs), pool=None, as_json=False))  # type: ignore[arg-type]
    return out.getvalue()


def test_at_80_columns_the_reasons_cut_are_said_whole_under_the_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [_job(1, None, "STATE_SCHEDULED"), _job(2, NEVER),
            *(_job(i, FULL) for i in range(3, 9))]
    text = job_list(monkeypatch, 80, jobs)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    table, _, whole = text.partition("Why waiting, whole:\n")
    assert NEVER not in table and "can never start" in table  # cut in its column, with …
    assert whole.split() == (f"00000002: {NEVER} 00000003, 00000004, 00000005 and 3 more: "
                             f"{FULL}").split(), text
    assert "00000001" not in whole  # it runs: no reason


def test_at_200_columns_the_table_holds_every_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    text = job_list(monkeypatch, 200, [_job(1, None, "STATE_SCHEDULED"), _job(2, NEVER)])
    assert NEVER in text and "Why waiting, whole" not in text, text


def test_many_distinct_reasons_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [_job(i, f"{NEVER} (case {i})") for i in range(1, 31)]
    whole = job_list(monkeypatch, 80, jobs).partition("Why waiting, whole:\n")[2]
    assert whole.count("can never start here") == cluster.WHOLE_REASONS
    assert whole.rstrip().endswith("(10 more reasons; --wide shows each whole)"), whole
