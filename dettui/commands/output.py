"""Shared CLI output: rich tables, JSON, times.

Rich is imported when something is printed through it (`console`, `err_console`, a table too
wide to lay out here): a table that fits, which the 10,000-job list is, goes out without it
(0.02 s of a command's start)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console

PIPED_WIDTH = 240  # piped output keeps whole rows (ids, uuids) on one line


def __getattr__(name: str) -> Any:
    """`console` and `err_console`, made on first use. Neither reads markup: what they print
    carries names, paths and messages of users."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    if name == "console":
        made = Console(highlight=False, soft_wrap=False, markup=False,
                       width=None if sys.stdout.isatty() else PIPED_WIDTH)
    else:  # messages are lines the terminal wraps, never broken mid-sentence by us
        made = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    globals()[name] = made
    return made


def _console() -> Console:
    made = globals().get("console")
    return made if made is not None else __getattr__("console")


def _screen() -> tuple[TextIO, int, bool]:
    """Where a table goes, how wide it may be and whether its heads are bold: the console's if
    one is made (or set by a test), else read off stdout as Rich reads it."""
    made = globals().get("console")
    if made is not None:
        return made.file, made.width, made.is_terminal and made.color_system is not None
    if not sys.stdout.isatty():
        return sys.stdout, PIPED_WIDTH, False
    term = os.environ.get("TERM", "")
    return sys.stdout, shutil.get_terminal_size().columns, term not in ("dumb", "unknown")


# RFC 3339 in UTC as the master writes it (`wire.ts`): a valid one's date and time are read
# off the text (days 29-31 go through datetime, which knows the months' lengths).
_WIRE_TIME = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])T([01]\d|2[0-3]):[0-5]\d:"
                        r"[0-5]\d(\.\d{1,9})?Z")


async def confirmed(yes: bool, question: str, refusal: str) -> bool:
    """A destructive command goes on: with --yes, or a y answer to `question` on a terminal;
    without a terminal to ask, InvalidArgument(`refusal`)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        from dettui.errors import InvalidArgument

        raise InvalidArgument(refusal)
    import asyncio

    answer = await asyncio.to_thread(input, f"{question} This cannot be undone. [y/N] ")
    if answer.strip().lower() in ("y", "yes"):
        return True
    _console().print("Nothing deleted.")
    return False


def warn(message: str) -> None:
    from rich.text import Text

    __getattr__("err_console").print(Text.assemble(("warning:", "yellow"), " ", message))


def log_line(message: str) -> None:
    """Print a trial's log line (`dettui trial logs`): control characters escaped; its colours
    shown on a terminal that has colour (not NO_COLOR), dropped elsewhere."""
    from dettui.terminal_text import log_text, safe_line

    if "\x1b[" in message and _colour():
        body, end = (message[:-1], "\n") if message.endswith("\n") else (message, "")
        _console().print(log_text(body), end=end, soft_wrap=True)
        return
    sys.stdout.write(safe_line(message))


def _colour() -> bool:
    """Whether stdout shows colour: a terminal, not TERM=dumb, no NO_COLOR."""
    made = globals().get("console")
    if made is not None:
        return bool(made.is_terminal and made.color_system is not None)
    return (sys.stdout.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM", "") not in ("dumb", "unknown"))


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# Control characters in a cell would move the terminal's cursor or restyle it (Rich passes ESC
# through): tabs and newlines become spaces, the others U+FFFD.
_CELL = {i: "\ufffd" for i in [*range(0x20), 0x7f, *range(0x80, 0xa0)]}
_CELL.update({0x09: " ", 0x0a: " ", 0x0d: " "})
_CELL.update({i: "\ufffd" for i in [0x061c, 0x200e, 0x200f, *range(0x202a, 0x202f),
                                     *range(0x2066, 0x206a)]})  # bidi controls: a name reversed


def cell(value: Any) -> str:
    """A table cell's text: never markup, never a control character (every one of them is
    unprintable, so a printable text is kept as it is: 4x faster over a 10,000-job queue)."""
    if value is None:
        return ""
    text = str(value)
    return text if text.isprintable() else text.translate(_CELL)


def _cells(row: Sequence[Any]) -> list[str]:
    """A row's cells (`cell` of each): a row of printable text, most of them, is checked once."""
    texts = ["" if v is None else str(v) for v in row]
    if "".join(texts).isprintable():
        return texts
    return [t if t.isprintable() else t.translate(_CELL) for t in texts]


def _width(text: str) -> int:
    """Terminal columns of a cell's text."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table in Rich's heavy-head style. One that fits the width is laid out here, a line per
    row (Rich's layout took 1.3 s for 10,000 rows); a wider one goes to Rich, which folds cells."""
    cells = [_cells(row) for row in rows]
    heads = [cell(c) for c in columns]
    widths = [_width(h) for h in heads]
    ascii_rows = True
    for i, column in enumerate(zip(*cells, strict=True)):  # a column measured at once
        if "".join(column).isascii():
            widths[i] = max(widths[i], *map(len, column))
        else:
            widths[i] = max(widths[i], *map(_width, column))
            ascii_rows = False
    file, width, bold = _screen()
    if sum(widths) + 3 * len(widths) + 1 > width:
        _rich_table(title, heads, cells)
        return
    out: list[str] = []
    if title:
        out.append(title)

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def line(texts: Sequence[str], bar: str, style: bool = False) -> str:
        parts = []
        for text, w in zip(texts, widths, strict=True):
            pad = " " * (w - _width(text))
            parts.append(f" \x1b[1m{text}\x1b[0m{pad} " if style else f" {text}{pad} ")
        return bar + bar.join(parts) + bar

    out.append(rule("┏", "┳", "┓", "━"))
    out.append(line(heads, "┃", bold))
    out.append(rule("┡", "╇", "┩", "━"))
    inner = " │ "
    for row in cells:  # an ASCII row (most) is padded by str.ljust: a third of the time
        if ascii_rows or "".join(row).isascii():
            out.append("│ " + inner.join(map(str.ljust, row, widths)) + " │")
        else:
            out.append(line(row, "│"))
    out.append(rule("└", "┴", "┘", "─"))
    file.write("\n".join(out) + "\n")
    file.flush()


def _rich_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", show_lines=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(Text(v) for v in row))  # never markup
    _console().print(t)


def when(value: str | None) -> str:
    """A wire time as `YYYY-MM-DD HH:MM:SS`, in the zone it was given in."""
    if not value:
        return ""
    if _WIRE_TIME.fullmatch(value):  # the master's own form (a queue has 10,000 of them)
        return f"{value[:10]} {value[11:19]}"
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return dt.strftime("%Y-%m-%d %H:%M:%S")


def state(value: str | None) -> str:
    return (value or "").removeprefix("STATE_")


def metrics_text(workload: dict[str, Any] | None, limit: int = 4) -> str:
    if not workload:
        return ""
    avg = (workload.get("metrics") or {}).get("avgMetrics") or {}
    parts = [f"{k}={_num(v)}" for k, v in list(avg.items())[:limit]]
    return ", ".join(parts)


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
