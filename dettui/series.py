"""Downsampling a metric series for a chart: a chart never needs more points than it has
columns. Pure; used by the master (GET /api/v1/trials/{id}/metrics?maxPoints=N) and by the
dashboard when it appends new points to a chart."""

from __future__ import annotations

from collections.abc import Sequence

Point = tuple[float, float]  # (steps, value), in steps order


def downsample(points: Sequence[Point], n: int) -> list[Point]:
    """At most `n` (>= 2) of `points`: the first and the last, and between them the lowest and
    the highest of each of (n - 2) // 2 even buckets, in their order, so that spikes survive.
    O(len(points))."""
    if len(points) <= n:
        return list(points)
    if n < 2:
        raise ValueError("downsample: n must be at least 2")
    inner = points[1:-1]
    buckets = (n - 2) // 2
    out = [points[0]]
    for b in range(buckets):
        lo, hi = len(inner) * b // buckets, len(inner) * (b + 1) // buckets
        if lo >= hi:
            continue
        chunk = range(lo, hi)
        low = min(chunk, key=lambda i: inner[i][1])
        high = max(chunk, key=lambda i: inner[i][1])
        out += [inner[i] for i in sorted({low, high})]
    out.append(points[-1])
    return out


def of_reports(rows: Sequence[tuple[int, str]], n: int,
               only: str | None = None) -> list[dict[str, object]]:
    """Each numeric metric of these reports ((steps, avgMetrics JSON) by steps) as a series
    of at most `n` points: `[{"name", "steps": [...], "values": [...]}]` by name (of `only`
    alone if given). NaN and infinities are left out (a chart cannot draw them)."""
    import json
    import math

    found: dict[str, list[Point]] = {}
    for steps, text in rows:
        for name, value in json.loads(text).items():
            if (only is not None and name != only) or isinstance(value, bool) or \
                    not isinstance(value, int | float) or not math.isfinite(value):
                continue
            found.setdefault(name, []).append((steps, value))
    out: list[dict[str, object]] = []
    for name in sorted(found):
        points = downsample(found[name], n)
        out.append({"name": name, "steps": [p[0] for p in points],
                    "values": [p[1] for p in points]})
    return out
