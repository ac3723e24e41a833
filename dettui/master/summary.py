"""A trial's summary metrics (Determined's `summaryMetrics`): per group, per metric, its type
and for numbers count, sum, min, max, mean and last, folded report by report as Determined's
calculateNewSummaryMetrics does (pure)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

# Determined's keys: training reports are "avg_metrics", validations "validation_metrics".
PATHS = {"training": "avg_metrics", "validation": "validation_metrics"}
SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?$")


def _kind(value: Any) -> tuple[str, float]:
    if isinstance(value, bool):
        return "boolean", 0.0
    if isinstance(value, int | float):
        return "number", float(value)
    if isinstance(value, str):
        if value in SPECIAL:
            return "number", SPECIAL[value]
        return ("date" if _ISO.match(value) else "string"), 0.0
    if isinstance(value, dict):
        return "object", 0.0
    if isinstance(value, list):
        return "array", 0.0
    return ("null" if value is None else "string"), 0.0


def _out(x: Any) -> Any:
    """NaN and infinities as Determined writes them (strings), other values unchanged."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    return x


def fold(summary: dict[str, dict[str, Any]], metrics: dict[str, Any]) -> None:
    """One report of a group into that group's summary."""
    for name, value in metrics.items():
        kind, x = _kind(value)
        entry = summary.get(name)
        if entry is None:
            entry = {"type": kind}
        elif entry["type"] != kind:
            kind, entry = "string", {"type": "string"}
        summary[name] = entry
        if kind != "number":
            continue
        if "count" not in entry:
            entry.update(min=x, max=x, sum=x, mean=x, count=1)
        else:
            entry["min"], entry["max"] = min(_num(entry["min"]), x), max(_num(entry["max"]), x)
            entry["sum"] = _num(entry["sum"]) + x
            entry["count"] += 1
            entry["mean"] = entry["sum"] / entry["count"]
        for key in ("min", "max", "sum", "mean"):
            entry[key] = _out(entry[key])
    for name, entry in summary.items():
        entry["last"] = _out(metrics.get(name))


def _num(x: Any) -> float:
    return SPECIAL[x] if isinstance(x, str) else float(x)


def summarize(reports: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """(group, metrics) reports in the order they were made; None when there are none."""
    out: dict[str, dict[str, Any]] = {}
    for group, metrics in reports:
        fold(out.setdefault(PATHS.get(group, group), {}), metrics)
    return out or None
