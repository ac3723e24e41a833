"""Destructive commands (experiment delete, checkpoint delete) confirm first: --yes, or a y on a
terminal; without a terminal to ask they refuse, saying how to confirm."""

from __future__ import annotations

import io

import pytest

from dettui.commands import output
from dettui.errors import InvalidArgument


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_yes_goes_on_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("builtins.input", lambda _: pytest.fail("asked"))
    assert await output.confirmed(True, "Delete?", "add --yes")


async def test_without_a_terminal_it_refuses_saying_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    with pytest.raises(InvalidArgument, match="add --yes"):
        await output.confirmed(False, "Delete?", "add --yes")


@pytest.mark.parametrize(("answer", "goes_on"), [("y", True), ("yes", True), ("", False),
                                                 ("n", False), ("whatever", False)])
async def test_on_a_terminal_only_y_goes_on(monkeypatch: pytest.MonkeyPatch, answer: str,
                                            goes_on: bool) -> None:
    monkeypatch.setattr("sys.stdin", Tty())
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda q: asked.append(q) or answer)
    assert await output.confirmed(False, "Delete it?", "add --yes") is goes_on
    assert asked == ["Delete it? This cannot be undone. [y/N] "]
