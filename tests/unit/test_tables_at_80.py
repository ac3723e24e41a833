"""The CLI's tables in an 80-column terminal keep what they are read for (review 31, N6): a
State whole (`! COMPLETED`, not `! COMPLET…`), an experiment's Name and Checkpoints before its
Owner, the queue's states in plain words (PAUSED, as the dashboard says) under short headings
(`Slots`, not `Slots (acquir…`), an agent's Enabled, Host and Pool before how its trials
run, and `e describe`'s checkpoints with their Steps and their metric rounded to 4 digits."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from dettui.commands import cluster, experiment, output

WIDTH = 80
WHEN = "2026-11-27T16:00:18Z"
UUID = "d41ba23c-090f-4054-90b3-6ab242690af2"


def _experiment(exp_id: int, name: str, state: str, **more: Any) -> dict[str, Any]:
    return {"id": exp_id, "username": "determined", "name": name, "state": state,
            "progress": None, "numTrials": 1, "checkpointSize": "60518", "checkpointCount": 2,
            "startTime": WHEN, "endTime": WHEN, "resourcePool": "default",
            "searcherType": "single", "config": {"searcher": {"metric": "validation_loss"}},
            **more}


def _job(entity: int, name: str, queued: str, experiment_state: str) -> dict[str, Any]:
    return {"summary": {"jobsAhead": entity - 1, "state": queued}, "name": name,
            "entityId": str(entity), "type": "TYPE_EXPERIMENT", "jobId": f"{entity:08d}-job",
            "priority": 42, "weight": 1, "submissionTime": WHEN, "allocatedSlots": 0,
            "requestedSlots": 1, "experimentState": experiment_state, "username": "determined"}


class FakeMaster:
    """What the master answers these commands, as the wire carries it."""

    async def experiments(self, **_: Any) -> list[dict[str, Any]]:
        return [_experiment(1, "spirals-mlp", "STATE_COMPLETED", warnings=["no validation"]),
                _experiment(2, "spirals-trial-class", "STATE_ACTIVE", progress=0.25)]

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return _experiment(exp_id, "spirals-mlp", "STATE_COMPLETED")

    async def trials(self, exp_id: int) -> list[dict[str, Any]]:
        return [{"id": 1, "state": "STATE_COMPLETED", "hparams": {"lr": 0.03}, "restarts": 0,
                 "totalBatchesProcessed": 200, "bestValidation": None}]

    async def checkpoints(self, exp_id: int, **_: Any) -> list[dict[str, Any]]:
        return [{"uuid": UUID, "state": "STATE_COMPLETED", "reportTime": WHEN,
                 "metadata": {"steps_completed": 200}, "resources": {"w.pt": 60518},
                 "training": {"trialId": 1, "searcherMetric": 0.5533067584037781}}]

    async def pools(self) -> list[dict[str, Any]]:
        return [{"name": "default", "defaultComputePool": True,
                 "schedulerType": "SCHEDULER_TYPE_PRIORITY"}]

    async def jobs(self, pool: str | None = None) -> list[dict[str, Any]]:
        return [_job(1, "spirals-trial-class", "STATE_SCHEDULED", "STATE_ACTIVE"),
                _job(2, "spirals-mlp", "STATE_QUEUED", "STATE_PAUSED"),
                _job(3, "spirals-trial-class", "STATE_QUEUED", "STATE_ACTIVE")]

    async def agents(self) -> list[dict[str, Any]]:
        cpu = {"device": {"type": "TYPE_CPU"}}
        return [{"id": "gpu-host-1", "hostname": "gpu-host-1", "registeredTime": WHEN,
                 "slots": {"0": {**cpu, "container": {"id": "x"}}, "1": cpu},
                 "resourcePools": ["default"], "enabled": False,
                 "sandbox": "sandboxed, as a uid per user"}]

    async def tasks(self) -> list[dict[str, Any]]:
        return [{"allocationId": "2.a", "experimentId": 2, "trialId": 7, "registeredTime": WHEN,
                 "resources": [{"agentId": "gpu-host-1", "slots": [0]}]}]


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=WIDTH, highlight=False,
                                                   soft_wrap=False, markup=False))
    return out


def _rows(text: str) -> list[list[str]]:
    """The cells of each line of a table's body and heading."""
    return [[c.strip() for c in line.split(line[0])[1:-1]] for line in text.splitlines()
            if line[:1] in "┃│"]


def _fits(text: str) -> None:
    wide = [line for line in text.splitlines() if output.text_width(line) > WIDTH]
    assert not wide, text


def test_e_list_keeps_state_name_and_checkpoints_whole(screen: io.StringIO) -> None:
    asyncio.run(experiment.list_(FakeMaster(), show_all=False, as_json=False))  # type: ignore[arg-type]
    text = screen.getvalue()
    _fits(text)
    head, first, second = _rows(text)
    assert head[:3] == ["ID", "Name", "State"], text
    assert first[1:3] == ["spirals-mlp", "! COMPLETED"], text
    assert second[1] == "spirals-trial-class" and second[2] == "ACTIVE", text
    assert "59.1 KiB (2)" in first, text
    assert "Owner" not in head and "Owner" in text  # given way first, and named


def test_job_list_says_plain_states_under_short_headings(screen: io.StringIO) -> None:
    asyncio.run(cluster.job_list(FakeMaster(), pool=None, as_json=False))  # type: ignore[arg-type]
    text = screen.getvalue()
    _fits(text)
    head, *rows = _rows(text)
    assert "Slots" in head and "State" in head and "…" not in " ".join(head), text
    states = [row[head.index("State")] for row in rows]
    assert states == ["SCHEDULED", "PAUSED", "QUEUED"], text
    assert "STATE_" not in text and "TYPE_" not in text


def test_agent_list_puts_enabled_host_and_pool_first(screen: io.StringIO) -> None:
    asyncio.run(cluster.agent_list(FakeMaster(), as_json=False))  # type: ignore[arg-type]
    text = screen.getvalue()
    _fits(text)
    head, row = _rows(text)
    assert head[:5] == ["Agent ID", "Enabled", "Host", "Pool", "Slots"], text
    assert row[:5] == ["gpu-host-1", "no", "gpu-host-1", "default", "1 of 2"], text
    assert "Trials run" in text  # how its trials run: named as left out, --wide shows it


def test_e_describe_checkpoints_show_steps_and_a_rounded_metric(screen: io.StringIO) -> None:
    asyncio.run(experiment.describe(FakeMaster(), 1, as_json=False))  # type: ignore[arg-type]
    text = screen.getvalue()
    _fits(text)
    table = text.split("Checkpoints\n", 1)[1]
    head, row = _rows(table)[:2]
    assert head == ["Trial ID", "UUID", "Steps", "validation_loss"], table
    assert row == ["1", UUID, "200", "0.5533"], table


def test_a_state_is_never_cut_however_narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=40, highlight=False,
                                                   soft_wrap=False, markup=False))
    output.table(None, ["ID", "Description", "State", "Owner"],
                 [(1, "x" * 60, "STOPPING_CANCELED", "determined")])
    assert "STOPPING_CANCELED" in out.getvalue(), out.getvalue()
