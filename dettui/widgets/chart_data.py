"""What the compare chart is drawn from, made from the master's JSON: flattened
hyperparameters, numbers that can be drawn, report times placed on a time axis, and which way a
metric is better. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dettui.widgets.shown import number

# Words in a metric's name that say higher is better (else lower is, as for a loss).
HIGHER_IS_BETTER = ("acc", "auc", "precision", "recall", "f1", "score", "reward", "iou")
UNITS = ((120.0, 1.0, "seconds"), (7200.0, 60.0, "minutes"), (math.inf, 3600.0, "hours"))


def fmt(value: Any) -> str:
    """A value for a cell: numbers to 5 significant digits."""
    return f"{value:.5g}" if number(value) is not None else ("" if value is None else str(value))


def higher_is_better(metric: str) -> bool:
    """What a metric's name says (accuracy: higher is better; a loss: lower)."""
    name = metric.casefold()
    return any(word in name for word in HIGHER_IS_BETTER)


def epoch(stamp: str) -> float | None:
    """An RFC 3339 time (`2026-11-22T12:00:00Z`) as Unix seconds, None if it is not one."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        return None


def at_times(points: Sequence[tuple[float, float]], anchors: Sequence[tuple[float, float]],
             start: float) -> list[float]:
    """Seconds since `start` of each point, by its steps, interpolated between the anchors
    (steps, epoch seconds; sorted, at least one) around it (held flat past the first and the
    last)."""
    out, j = [], 0
    for steps, _ in points:
        while j + 1 < len(anchors) and anchors[j + 1][0] < steps:
            j += 1
        (s0, t0), (s1, t1) = anchors[j], anchors[min(j + 1, len(anchors) - 1)]
        if steps <= s0 or s1 == s0:
            t = t0 if steps <= s0 or steps < s1 else t1
        else:
            t = t0 + (t1 - t0) * min((steps - s0) / (s1 - s0), 1.0)
        out.append(t - start)
    return out


def time_unit(span: float) -> tuple[float, str]:
    """The unit a time axis spanning `span` seconds reads best in: (seconds per unit, name)."""
    return next((u[1], u[2]) for u in UNITS if span < u[0])
