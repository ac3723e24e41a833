"""A missing object reads "Not found: experiment 6", not Determined's wire text under our title
("Not found: experiment '6' not found")."""

from __future__ import annotations

import pytest

from dettui import cli


def test_a_missing_experiment_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.die("experiment '6' not found", "Not found") == 1
    line = capsys.readouterr().err.strip()
    assert line == "Not found: experiment 6", line


def test_other_not_found_messages_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    cli.die("no checkpoint 'abc' in the storage", "Not found")
    assert capsys.readouterr().err.strip() == "Not found: no checkpoint 'abc' in the storage"
