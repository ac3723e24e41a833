"""The master's own words in a trial's log and its serve log (issue 31, N15): each attempt
begins with a marker line in `t logs`; an allocation's end reads as words, not
`exited (code None lost)`."""

from __future__ import annotations

import json

import pytest

from dettui.master import lifecycle
from dettui.master.store import exits
from tests.master.conftest import Api, allocate
from tests.master.test_api import create


async def _log_lines(api: Api, trial_id: int) -> list[dict]:
    resp = await api.client.get(f"/api/v1/trials/{trial_id}/logs", headers=api.headers())
    text = await resp.text()
    return [json.loads(line)["result"] for line in text.splitlines() if line.strip()]


async def test_each_attempt_starts_with_a_marker(api: Api) -> None:
    exp = await create(api)
    trial_id = (await api.call("GET", f"/api/v1/experiments/{exp['experiment']['id']}/trials")
                )["trials"][0]["id"]
    alloc, _ = await allocate(api, trial_id, "agent-x")
    lines = await _log_lines(api, trial_id)
    assert [ln["log"] for ln in lines] == \
        [f"— attempt 1 of trial {trial_id}, on agent agent-x —\n"]
    assert lines[0]["level"] == "LOG_LEVEL_INFO"


@pytest.mark.parametrize(("code", "reason", "said"), [
    (None, lifecycle.LOST, "ended with no exit code: its agent was lost (gone, or restarted "
                           "without it)"),
    (None, lifecycle.KILLED, "ended with no exit code: killed"),
    (None, "", "ended with no exit code: unknown"),
    (0, "exit", "exited with code 0"),
    (1, "error", "exited with code 1"),
    (137, "signal 9", "exited with code 137 (signal 9)"),
])
def test_an_end_in_plain_words(code: int | None, reason: str, said: str) -> None:
    assert exits.how_it_ended(code, reason) == said
    assert "None" not in exits.how_it_ended(code, reason)
