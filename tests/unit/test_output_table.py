"""The CLI's tables: laid out by hand when they fit (the 10,000-row job list), by Rich when they
do not, the same to the eye either way, and never a control character of the data on screen."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dettui.commands import output

COLUMNS = ["ID", "Name", "State"]
ROWS = [(1, "mnist", "QUEUED"), (22, None, "RUNNING"), (3, "日本語の名前", "PAUSED")]


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=120, highlight=False,
                                                   soft_wrap=False, markup=False))
    return out


def _by_rich(title: str, rows: list[tuple[object, ...]], width: int = 120) -> str:
    out = io.StringIO()
    console = output.console
    try:
        output.console = Console(file=out, width=width, highlight=False, soft_wrap=False,
                                 markup=False)
        output._rich_table(title, COLUMNS, [[output.cell(v) for v in r] for r in rows])
    finally:
        output.console = console
    return out.getvalue()


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_a_table_that_fits_looks_as_rich_draws_it(screen: io.StringIO) -> None:
    output.table("Jobs", COLUMNS, ROWS)
    assert _lines(screen.getvalue()) == _lines(_by_rich("Jobs", ROWS))
    assert "│ 3  │ 日本語の名前 │ PAUSED  │" in screen.getvalue()


def test_control_characters_never_reach_the_terminal(screen: io.StringIO) -> None:
    output.table(None, COLUMNS, [(1, "red\x1b[31mname\x07\x9b2J", "a\tb\nc")])
    shown = screen.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert "red\ufffd[31mname\ufffd\ufffd2J" in shown
    assert "a b c" in shown


def test_a_table_wider_than_the_screen_folds_its_cells(screen: io.StringIO) -> None:
    long = "x" * 300
    output.table(None, COLUMNS, [(1, long, "QUEUED")])
    lines = screen.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 120
    assert "".join(line.split("│")[2].strip() for line in lines if line.startswith("│")) == long


def test_times_read_off_the_text_agree_with_datetime() -> None:
    """`when` reads the master's own times off the text (a queue has 10,000): for valid and
    invalid ones alike it shows what parsing them with datetime shows."""
    import random
    from datetime import datetime

    def parsed(value: str) -> str:
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return dt.strftime("%Y-%m-%d %H:%M:%S")

    rng = random.Random(3)
    for _ in range(20_000):
        value = (f"{rng.randint(1990, 2100):04d}-{rng.randint(0, 13):02d}-"
                 f"{rng.randint(0, 32):02d}T{rng.randint(0, 25):02d}:{rng.randint(0, 61):02d}:"
                 f"{rng.randint(0, 61):02d}"
                 + rng.choice(["Z", ".123456Z", ".1Z", "", "+01:00", "x"]))
        assert output.when(value) == parsed(value), value
    assert output.when("2024-02-29T23:59:59.5Z") == "2024-02-29 23:59:59"
    assert output.when("2023-02-29T10:00:00Z") == "2023-02-29T10:00:00Z"  # no such day
    assert output.when(None) == "" and output.when("") == ""
