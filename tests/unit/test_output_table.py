"""The CLI's tables: laid out by hand as Rich draws them (the 10,000-row job list), as wide as
the screen (a lone row as field/value lines, columns left out and named, long cells cut with an
ellipsis; `--wide` shows everything), and never a control character of the data on screen."""

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
    from rich.table import Table
    from rich.text import Text

    out = io.StringIO()
    t = Table(title=title, title_justify="left", show_lines=False, header_style="bold")
    for col in COLUMNS:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(Text(output.cell(v)) for v in row))
    Console(file=out, width=width, highlight=False, soft_wrap=False, markup=False).print(t)
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


def _narrow(monkeypatch: pytest.MonkeyPatch, width: int) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=width, highlight=False,
                                                   soft_wrap=False, markup=False))
    return out


def test_a_long_cell_is_cut_with_an_ellipsis(screen: io.StringIO) -> None:
    long = "x" * 300
    output.table(None, COLUMNS, [(1, long, "QUEUED"), (2, "日本語" * 60, "PAUSED")])
    lines = screen.getvalue().splitlines()
    assert all(output.text_width(line) <= 120 for line in lines), lines
    assert len(lines) == 6  # a line per row: nothing folds
    assert "x" * 100 + "…" in lines[3] and "QUEUED" in lines[3]
    assert "日本語…" in lines[4] or "日本…" in lines[4]


def test_a_lone_row_too_wide_reads_as_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _narrow(monkeypatch, 40)
    heads = ["ID", "Name", "State", "Progress", "Owner", "Hyperparameters"]
    output.table("Experiment 1", heads, [(1, "spirals", "ACTIVE", "40%", "determined",
                                          "learning_rate=0.03, hidden=64, batch_size=64")],
                 record=True)
    lines = out.getvalue().splitlines()
    assert lines[0] == "Experiment 1" and all(output.text_width(line) <= 40 for line in lines)
    assert "│ State           │ ACTIVE" in out.getvalue()
    assert any(line.startswith("│ Hyperparameters │ learning_rate=0") and "…" in line
               for line in lines), lines


def test_columns_give_way_and_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _narrow(monkeypatch, 60)
    heads = ["ID", "Name", "State", "Submitted", "Slots", "Pool", "User"]
    rows = [(i, f"experiment-{i}", "QUEUED", "2026-11-27 16:00:18", "0/1", "default",
             "determined") for i in range(3)]
    output.table(None, heads, rows, least_needed=["Submitted"])
    lines = out.getvalue().splitlines()
    assert all(output.text_width(line) <= 60 for line in lines), lines
    assert "State" in lines[1] and "Submitted" not in lines[1]
    note = " ".join(lines[-2:])
    assert "Submitted" in note and "--wide" in note
    assert len([line for line in lines if line.startswith("│")]) == 3


def test_wide_shows_every_cell_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _narrow(monkeypatch, 40)
    monkeypatch.setattr(output, "WIDE", True)
    long = "y" * 100
    output.table(None, COLUMNS, [(1, long, "QUEUED"), (2, "b", "PAUSED")])
    assert long in out.getvalue() and "…" not in out.getvalue()


def test_the_width_is_columns_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert output.screen_width() == 80
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert output.screen_width() == output.PIPED_WIDTH


def test_hyperparameters_read_as_key_value() -> None:
    text = output.hparams_text({"lr": 0.000123456, "layers": {"n": 2, "act": "relu"}, "e": {}})
    assert text == "lr=0.0001235, layers.n=2, layers.act=relu, e={}"
    heads, cells = output.hparam_columns([{"lr": 0.1, "layers": {"n": 2}}, {"lr": 0.2}])
    assert heads == ["lr", "layers.n"] and cells == [["0.1", "2"], ["0.2", ""]]


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


def test_a_column_of_uuids_is_never_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint's UUID is what `checkpoint download` takes: other columns give way."""
    out = _narrow(monkeypatch, 60)
    uuid = "d41ba23c-090f-4054-90b3-6ab242690af2"
    output.table(None, ["Trial", "State", "Metric", "UUID", "Size", "Reported"],
                 [(3, "COMPLETED", 0.660912, uuid, "10.7 KiB", "2026-11-27 16:08:25")])
    lines = out.getvalue().splitlines()
    assert uuid in out.getvalue() and all(output.text_width(line) <= 60 for line in lines), lines
