"""Every command that prints a table takes --json (every field) and --wide (every column and
cell whole); `e set gc-policy`'s preview had no --json."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dettui import cli
from dettui.commands import experiment

TABLES = [["e", "list"], ["e", "describe", "1"], ["t", "describe", "1"], ["c", "list", "1"],
          ["job", "list"], ["agent", "list"], ["task", "list"], ["user", "list"],
          ["agent", "token", "list"],
          ["e", "set", "gc-policy", "1", "--save-experiment-best", "0", "--save-trial-best", "0",
           "--save-trial-latest", "1"]]


@pytest.mark.parametrize("argv", TABLES, ids=[" ".join(a[:2]) for a in TABLES])
def test_table_commands_take_json_and_wide(argv: list[str]) -> None:
    args = cli._parser().parse_args([*argv, "--json", "--wide"])
    assert args.json and args.wide


class Previewing:
    async def preview_gc(self, exp_id: int, policy: Any) -> list[dict[str, Any]]:
        return [{"TrialID": 1, "UUID": "u", "StepsCompleted": 10, "ReportTime": None}]


def test_the_gc_preview_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(experiment.set_gc_policy(Previewing(), 1, experiment_best=0,  # type: ignore
                                         trial_best=0, trial_latest=1, yes=False, as_json=True))
    assert json.loads(capsys.readouterr().out) == [
        {"TrialID": 1, "UUID": "u", "StepsCompleted": 10, "ReportTime": None}]
