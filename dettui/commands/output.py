"""Shared CLI output: rich tables, JSON, times."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Piped output keeps whole rows (ids, uuids) on one line instead of folding at 80 columns.
# Neither console reads markup: what they print carries names, paths and messages of users.
console = Console(highlight=False, soft_wrap=False, markup=False,
                  width=None if sys.stdout.isatty() else 240)
# Messages are lines the terminal wraps, never broken mid-sentence by us.
err_console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


def warn(message: str) -> None:
    err_console.print(Text.assemble(("warning:", "yellow"), " ", message))


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left", show_lines=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(Text("" if v is None else str(v)) for v in row))  # never markup
    console.print(t)


def when(value: str | None) -> str:
    if not value:
        return ""
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
