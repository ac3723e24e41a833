"""Shared CLI output: tables, JSON, times.

Tables fit the terminal's width (COLUMNS, else the terminal's, else 240 columns when piped):
a table too wide shows a lone row as field/value lines, and otherwise gives way column by
column (the ones a command names as least needed first, then from the right, each named
below the table) and cuts long cells with an ellipsis; `--wide` shows every cell whole, and
`--json` every field. Tables are laid out here, a line per row (Rich's layout took 1.3 s for
10,000 rows); Rich is imported when something is printed through it (`console`,
`err_console`)."""

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
NARROWEST = 10  # columns a cell keeps before its column is left out of a table too wide
HEAD_KEPT = 14  # and of its heading (`learning_rate`), so that what a column is stays readable
SHORT_WHOLE = {"State": 20}  # short columns a table is read for, kept whole up to this many
# characters (`! COMPLETED`, `STOPPING_CANCELED`); only a longer cell (a reason) is cut
WIDE = False  # --wide: every column and every cell whole, however wide the table


def set_wide(on: bool) -> None:
    """`--wide`: tables show every cell whole instead of fitting the terminal."""
    global WIDE
    WIDE = on


def screen_width() -> int:
    """Columns a table may take: $COLUMNS if set, else the terminal's (240 when piped)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else PIPED_WIDTH


def __getattr__(name: str) -> Any:
    """`console` and `err_console`, made on first use. Neither reads markup: what they print
    carries names, paths and messages of users."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    if name == "console":
        made = Console(highlight=False, soft_wrap=False, markup=False, width=screen_width())
    else:  # messages are lines the terminal wraps, never broken mid-sentence by us
        made = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    globals()[name] = made
    return made


def _console() -> Console:
    made = globals().get("console")
    return made if made is not None else __getattr__("console")


def screen() -> tuple[TextIO, int, bool]:
    """Where a table goes, how wide it may be and whether its heads are bold: the console's if
    one is made (or set by a test), else read off stdout as Rich reads it."""
    made = globals().get("console")
    if made is not None:
        return made.file, made.width, made.is_terminal and made.color_system is not None
    if not sys.stdout.isatty():
        return sys.stdout, screen_width(), False
    term = os.environ.get("TERM", "")
    return sys.stdout, screen_width(), term not in ("dumb", "unknown")


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

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


def text_width(text: str) -> int:
    """Terminal columns of a cell's text."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def hparams_text(hparams: dict[str, Any] | None) -> str:
    """Hyperparameters as `key=value, ...` (a nested one as `outer.inner=value`)."""
    return ", ".join(f"{k}={v}" for k, v in _flat_pairs(hparams))


HPARAM_COLUMNS = 6  # more hyperparameters than this share one `key=value, ...` column


def hparam_columns(hparams: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Trials' hyperparameters as table columns: one per hyperparameter (a nested one named
    `outer.inner`) when there are at most HPARAM_COLUMNS, else one `Hyperparameters` column of
    `key=value` pairs. Returns the heads and each trial's cells."""
    flat = [dict(_flat_pairs(h)) for h in hparams]
    names = list(dict.fromkeys(k for f in flat for k in f))
    if not names or len(names) > HPARAM_COLUMNS:
        return ["Hyperparameters"], [[hparams_text(h)] for h in hparams]
    return names, [[f.get(k, "") for k in names] for f in flat]


def _flat_pairs(hparams: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(name, value text) of each hyperparameter, a nested one's name `outer.inner`."""
    def flat(prefix: str, value: Any) -> list[tuple[str, str]]:
        if isinstance(value, dict) and value:
            return [p for k, v in value.items() for p in flat(f"{prefix}{k}.", v)]
        return [(prefix[:-1], _num(value))]

    return [p for k, v in (hparams or {}).items() for p in flat(f"{k}.", v)]


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          least_needed: Sequence[str] = (), record: bool = False) -> None:
    """A table in Rich's heavy-head style, as wide as the screen allows (`fit`); the columns
    named in `least_needed` give way first when it is too narrow. A `record` (one thing
    described: `e describe`'s experiment) too wide for its columns shows a field per line."""
    cells = [_cells(row) for row in rows]
    heads = [cell(c) for c in columns]
    widths = [text_width(h) for h in heads]
    for i, column in enumerate(zip(*cells, strict=True)):  # a column measured at once
        if "".join(column).isascii():
            widths[i] = max(widths[i], *map(len, column))
        else:
            widths[i] = max(widths[i], *map(text_width, column))
    file, width, bold = screen()
    notes: list[str] = []
    if not WIDE and _room(widths) > width:
        if record and len(cells) == 1 and len(heads) > 2:  # one thing: a field per line
            heads, cells = ["Field", "Value"], [[h, v] for h, v in zip(heads, cells[0],
                                                                        strict=True)]
            widths = [max(map(text_width, c)) for c in zip(heads, *cells, strict=True)]
        heads, cells, widths, left_out = fit(heads, cells, widths, width, least_needed)
        if left_out:
            notes = _wrapped(f"({len(left_out)} more column{'s' if len(left_out) > 1 else ''}"
                             f": {', '.join(left_out)}; --wide shows every column)", width)
    file.write("\n".join([*([title] if title else []), *_drawn(heads, cells, widths, bold),
                          *notes]) + "\n")
    file.flush()


def _room(widths: Sequence[int]) -> int:
    """Columns a table of these column widths takes, borders and padding included."""
    return sum(widths) + 3 * len(widths) + 1


def fit(heads: list[str], cells: list[list[str]], widths: list[int], width: int,
        least_needed: Sequence[str] = ()) -> tuple[list[str], list[list[str]], list[int],
                                                    list[str]]:
    """The table cut to `width` columns: the columns in `least_needed` are left out first, in
    that order, until the rest fits whole; then, while the columns left cannot all keep
    NARROWEST characters, or their heading's up to HEAD_KEPT (a column of UUIDs all of them, a
    State column up to SHORT_WHOLE's), the rightmost (never the first, nor a column of UUIDs or
    a State while another can go); then the widest are narrowed alike until it fits, their
    cells cut with an ellipsis. Returns the heads, cells and widths kept and the heads left
    out."""
    keep = list(range(len(heads)))
    for name in least_needed:
        if _room([widths[i] for i in keep]) <= width:
            break
        if name in heads and heads.index(name) in keep[1:]:
            keep.remove(heads.index(name))
    uuids = [bool(cells) and all(_UUID.fullmatch(row[i]) for row in cells)
             for i in range(len(heads))]  # ids to copy (checkpoints') are never cut
    floor = [w if uuids[i] else min(w, SHORT_WHOLE[heads[i]]) if heads[i] in SHORT_WHOLE
             else min(w, max(NARROWEST, min(text_width(heads[i]), HEAD_KEPT)))
             for i, w in enumerate(widths)]
    whole = [uuids[i] or heads[i] in SHORT_WHOLE for i in range(len(heads))]
    while len(keep) > 1 and _room([floor[i] for i in keep]) > width:
        cut = [i for i in keep[1:] if not whole[i]]
        keep.remove(cut[-1] if cut else keep[-1])
    room = max(width - _room([0] * len(keep)), len(keep))
    shown = _narrowed([widths[i] for i in keep], [floor[i] for i in keep], room)
    clipped = [[_clip(row[i], w) for i, w in zip(keep, shown, strict=True)] for row in cells]
    return ([_clip(heads[i], w) for i, w in zip(keep, shown, strict=True)], clipped, shown,
            [h for i, h in enumerate(heads) if i not in keep])


def _narrowed(widths: list[int], floor: list[int], room: int) -> list[int]:
    """Widths that add up to at most `room`: the widest cut to one cap, none below its floor
    (nor below 1), the cap as high as fits; columns left under their width get what is over."""
    if sum(widths) <= room:
        return widths
    cap = min(max(widths), room)
    while cap > 1 and sum(min(w, max(cap, f)) for w, f in zip(widths, floor, strict=True)) > room:
        cap -= 1
    out = [max(1, min(w, max(cap, f))) for w, f in zip(widths, floor, strict=True)]
    spare = room - sum(out)
    for i, w in enumerate(widths):
        more = min(spare, w - out[i])
        if more > 0:
            out[i] += more
            spare -= more
    return out


def _clip(text: str, width: int) -> str:
    """`text` in at most `width` terminal columns: a longer one cut, ending in an ellipsis."""
    if text_width(text) <= width:
        return text
    if text.isascii():
        return text[:max(width - 1, 0)] + "…"
    from rich.cells import cell_len

    out, used = [], 0
    for char in text:
        size = cell_len(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=max(width, 20)) or [text]


def _drawn(heads: Sequence[str], cells: Sequence[Sequence[str]], widths: Sequence[int],
           bold: bool) -> list[str]:
    """The lines of a table whose cells fit their widths."""
    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def line(texts: Sequence[str], bar: str, style: bool = False) -> str:
        parts = []
        for text, w in zip(texts, widths, strict=True):
            pad = " " * (w - text_width(text))
            parts.append(f" \x1b[1m{text}\x1b[0m{pad} " if style else f" {text}{pad} ")
        return bar + bar.join(parts) + bar

    out = [rule("┏", "┳", "┓", "━"), line(heads, "┃", bold), rule("┡", "╇", "┩", "━")]
    inner = " │ "
    for row in cells:  # an ASCII row (most) is padded by str.ljust: a third of the time
        if "".join(row).isascii():
            out.append("│ " + inner.join(map(str.ljust, row, widths)) + " │")
        else:
            out.append(line(row, "│"))
    out.append(rule("└", "┴", "┘", "─"))
    return out


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


def number(v: Any) -> str:
    """A metric's value as tables show it: a float to 4 significant digits (None: blank)."""
    return "" if v is None else _num(v)


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
