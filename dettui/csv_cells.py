"""Text cells of the CSV dettui writes (`dettui trial metrics --csv`, `det resources
allocations`), made safe to open in a spreadsheet: a cell that starts with `=`, `+`, `-`, `@`,
a tab or a carriage return is a formula to Excel, LibreOffice and Google Sheets
(`=HYPERLINK(...)`, `=cmd|' /C calc'!A0` as a metric name), so it gets a leading `'`, as
OWASP's CSV injection advice says. Numbers are written as numbers."""

from __future__ import annotations

from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> Any:
    """`value` for a CSV cell: a string that a spreadsheet would run, quoted with `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def row(values: Any) -> list[Any]:
    return [cell(v) for v in values]
