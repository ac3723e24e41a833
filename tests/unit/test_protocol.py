"""The agent protocol's messages: what the master sends is what the agent reads, and the
log lines the agent's spool ships are what the master validates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dettui.agent.logship import Line
from dettui.protocol import AgentLogLine, KillWork, StartWork, WorkBody


def test_work_round_trips_through_the_wire() -> None:
    start = StartWork(allocation_id="1.a.1", task_id="1.a", trial_id=1, experiment_id=2,
                      run_id=1, slots=[0, 1], node_rank=1, cuda_devices=[1],
                      entrypoint=["python3", "train.py"], env={"DET_TRIAL_ID": "1"},
                      session_token="tok")
    wire = WorkBody(work=[start, KillWork(allocation_id="1.b.1", reason="paused")]).wire()
    assert wire["work"][0]["allocationId"] == "1.a.1" and wire["work"][0]["kind"] == "start"
    assert wire["work"][1] == {"kind": "kill", "allocationId": "1.b.1", "reason": "paused"}
    back = WorkBody.model_validate(wire).work
    assert back == [start, KillWork(allocation_id="1.b.1", reason="paused")]


def test_an_unknown_kind_or_a_missing_field_is_refused() -> None:
    with pytest.raises(ValidationError):
        WorkBody.model_validate({"work": [{"kind": "reboot", "allocationId": "x"}]})
    with pytest.raises(ValidationError):
        WorkBody.model_validate({"work": [{"kind": "start", "allocationId": "x"}]})
    assert WorkBody.model_validate({"work": [], "newerField": 1}).work == []  # newer master


def test_the_spools_lines_are_what_the_master_validates() -> None:
    wire = {**Line(1700000000.5, "stderr", "boom\n", 1, "ERROR").wire("1.a.1"), "seq": 7}
    line = AgentLogLine.model_validate(wire)
    assert (line.allocation_id, line.seq, line.rank_id, line.stdtype, line.level, line.log) == (
        "1.a.1", 7, 1, "stderr", "ERROR", "boom\n")
