"""ANSI in logs (issue 29, attack 7): a trial's OSC, CSI and C1 sequences reach `dettui trial
logs` escaped, on a pipe and on a terminal (where only its colours are obeyed, through Rich)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dettui.client import Client
from dettui.commands import output, trial
from tests.master.conftest import Api, allocate
from tests.master.test_api import create

HOSTILE = ("\x1b]0;pwned\x07title \x1b[2J\x1b[Hcleared \x9b31mC1 \x1b[31mred\x1b[0m "
           "\u202eevil\x08\n")
ESCAPED = ("\\x1b]0;pwned\\x07title \\x1b[2J\\x1b[Hcleared \\x9b31mC1 red "
           "\\u202eevil\\x08\n")
CONTROLS = "\x00\x07\x08\x9b\x9d\u202e"


async def _trial_with_hostile_log(api: Api) -> Client:
    """Trial 1 ran and printed HOSTILE; a client of its owner."""
    await create(api)
    alloc, token = await allocate(api, 1)
    task_id = (await api.call("GET", "/api/v1/trials/1"))["trial"]["taskId"]
    await api.call("POST", "/api/v1/task/logs", {"logs": [
        {"taskId": task_id, "rankId": 0, "log": HOSTILE}]},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    return Client(str(api.client.server.make_url("")), api.token)


async def test_ansi_in_logs_reaches_a_piped_cli_escaped(
        api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    c = await _trial_with_hostile_log(api)
    try:
        await trial.logs(c, 1, follow=False, ranks=None, tail=None, as_json=False)
        await trial.logs(c, 1, follow=False, ranks=None, tail=5, as_json=False)
    finally:
        await c.close()
    out = capsys.readouterr().out
    assert out.count(ESCAPED) == 2, out
    assert "\x1b" not in out and not set(CONTROLS) & set(out), repr(out)


async def test_ansi_in_logs_reaches_a_terminal_as_colour_only(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(output, "console", Console(
        file=screen, force_terminal=True, color_system="standard", width=80, markup=False,
        highlight=False), raising=False)
    c = await _trial_with_hostile_log(api)
    try:
        await trial.logs(c, 1, follow=False, ranks=None, tail=None, as_json=False)
    finally:
        await c.close()
    shown = screen.getvalue()
    assert "\x1b[31mred\x1b[0m" in shown, repr(shown)  # Rich's own colour codes
    without_colour = shown.replace("\x1b[31m", "").replace("\x1b[0m", "")
    assert without_colour.endswith(ESCAPED) and without_colour.count("\n") == 1, repr(shown)
    assert not set(CONTROLS) & set(shown)
