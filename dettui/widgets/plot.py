"""Charts laid out as text for the compare screen: curves of several trials overlaid, a
scatter of one value against another (numbers or categories on x), and parallel coordinates.
Each takes its data and the cells it has and returns the rows to show (Rich Text, never
markup) and notes on what could not be drawn. Pure: braille dots on a Canvas, round y ticks
from `ticks.axis`."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.style import Style
from rich.text import Text

from dettui.widgets.braille import Canvas
from dettui.widgets.safe import clean
from dettui.widgets.ticks import axis

AXIS = Style(dim=True)
FRAME_ROWS = 3  # below the plot: the x axis line, its labels, its title
MIN_PLOT = (8, 3)  # the smallest plot (cells) worth drawing
X_LABEL_EVERY = 12  # cells per x tick, about
LABEL_WIDTH = 10  # at most this many cells for a y label


@dataclass(frozen=True)
class Curve:
    """One trial's points (x, y in data units, in x order) in its colour."""

    colour: str
    xs: Sequence[float]
    ys: Sequence[float]


@dataclass(frozen=True)
class Dot:
    """One trial on a scatter: x a number or a category, y a number."""

    colour: str
    x: float | str
    y: float


@dataclass
class Drawn:
    """Rows to show and what was left out (said under the chart, never silently dropped)."""

    rows: list[Text]
    notes: list[str] = field(default_factory=list)


def message(width: int, height: int, text: str) -> Drawn:
    """A chart with nothing to draw says why, in its middle."""
    words = Text(clean(text), end="", style=AXIS)
    words.truncate(max(width, 1), overflow="ellipsis")
    pad = max((width - words.cell_len) // 2, 0)
    rows = [Text(end="") for _ in range(max(height, 1))]
    rows[len(rows) // 2] = Text(" " * pad, end="") + words
    return Drawn(rows)


def _scale(low: float, high: float, size: int) -> tuple[float, float]:
    """(a, b) with a*value + b mapping low -> 0 and high -> size - 1, finite for any finite
    bounds: ±1e308 apart (their difference overflows: halves are taken) or 5e-324 apart
    (as flat, in the middle)."""
    half = high / 2 - low / 2
    a = (size - 1) / 2 / half if half else math.inf
    if not math.isfinite(a) or not math.isfinite(a * low):
        return 0.0, (size - 1) / 2
    return a, -low * a


def _fraction(value: float, low: float, high: float) -> float:
    """Where `value` lies from `low` (0) to `high` (1), in halves so that bounds ±1e308 apart
    do not overflow; 0.5 when they are equal."""
    half = high / 2 - low / 2
    return (value / 2 - low / 2) / half if half else 0.5


def _padded(low: float, high: float, share: float) -> tuple[float, float]:
    """`low` and `high` moved apart by `share` of their distance, kept finite."""
    pad = (high / 2 - low / 2) * 2 * share
    return max(low - pad, -sys.float_info.max), min(high + pad, sys.float_info.max)


def _y_axis(low: float, high: float, rows: int, log: bool) -> tuple[float, float, list[Text]]:
    """The plot's bottom and top values and the label of each row (blank between ticks)."""
    y = axis(low, high, rows=rows)
    ticks, texts = y.ticks, y.labels
    if log:
        ticks, texts = _log_ticks(y.low, y.high, rows)
    labels = [Text(end="") for _ in range(rows)]
    a, b = _scale(y.low, y.high, rows)
    for tick, label in zip(ticks, texts, strict=True):
        row = rows - 1 - round(a * tick + b)
        if 0 <= row < rows:
            labels[row] = Text(label, end="")
    return y.low, y.high, labels


def _log_ticks(low: float, high: float, rows: int) -> tuple[list[float], list[str]]:
    """Ticks of a log axis (bounds in log10): powers of ten, else 1-2-5 or 1-9 of each decade,
    the most of them that leave about two rows each."""
    most = max(rows // 2, 2)
    decades = range(math.floor(low), math.ceil(high) + 1)
    best: list[float] = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5, 7), tuple(range(1, 10))):
        found = [math.log10(m) + d for d in decades for m in mantissas
                 if low - 1e-9 <= math.log10(m) + d <= high + 1e-9]
        if len(found) > most:
            break
        best = found
    if len(best) < 2:
        best = [low, high]
    return best, [_pow10(t) for t in best]


def _pow10(exponent: float) -> str:
    """10**exponent as a label, also where it passes a float's range (a log axis of values
    near 1e308 is padded past it, or of 5e-324 below it)."""
    whole = math.floor(exponent)
    mantissa = 10 ** (exponent - whole)
    if -300 <= whole <= 300:
        return f"{mantissa * 10.0 ** whole:.3g}"
    return f"{mantissa:.3g}e{whole:+d}"


def _frame(plot: list[Text], ylabels: list[Text], xticks: list[tuple[int, str]],
           x_title: str, width: int) -> list[Text]:
    """The plot with its y labels and axis on the left and x axis, labels and title below."""
    margin = min(max((t.cell_len for t in ylabels), default=0), LABEL_WIDTH)
    rows = []
    for label, line in zip(ylabels, plot, strict=True):
        label.truncate(margin)
        row = Text(" " * (margin - label.cell_len), end="", style=AXIS)
        row.append_text(label)
        row.append("┤" if label.plain else "│", AXIS)
        rows.append(row + line)
    plot_w = plot[0].cell_len if plot else 0
    axis_line = ["─"] * plot_w
    labels = [" "] * plot_w
    free = 0
    for col, label in xticks:
        if 0 <= col < plot_w:
            axis_line[col] = "┬"
        start = max(min(col - len(label) // 2, plot_w - len(label)), 0)
        if start >= free and start + len(label) <= plot_w:
            labels[start:start + len(label)] = list(label)
            free = start + len(label) + 1
    rows.append(Text(" " * margin + "└" + "".join(axis_line), end="", style=AXIS))
    rows.append(Text(" " * (margin + 1) + "".join(labels), end="", style=AXIS))
    title = clean(x_title)[:width]
    rows.append(Text(" " * max((width - len(title)) // 2, 0) + title, end="", style=AXIS))
    return rows


def _x_ticks(low: float, high: float, plot_w: int, *,
             whole: bool = False) -> tuple[float, float, list[tuple[int, str]]]:
    """The x range is the data's (no room left empty at the ends); its round ticks inside
    (with `whole`, only those at whole numbers, as batches are)."""
    x = axis(low, high, rows=max(plot_w // X_LABEL_EVERY, 2))
    if high == low:
        low, high = x.low, x.high
    a, b = _scale(low, high, plot_w)
    return low, high, [(round(a * t + b), f"{t:.0f}" if whole else lab)
                       for t, lab in zip(x.ticks, x.labels, strict=True)
                       if low - 1e-9 * abs(high - low) <= t <= high + 1e-9 * abs(high - low)
                       and (not whole or float(t).is_integer())]


def _room(width: int, height: int, labels: int) -> tuple[int, int]:
    return width - labels - 1, height - FRAME_ROWS


def overlay(curves: Sequence[Curve], width: int, height: int, *, log_y: bool = False,
            x_title: str = "batches", whole_x: bool = False) -> Drawn:
    """The curves on one chart, the first on top (drawn last); with `log_y`, points at or
    below zero are left out and counted in the notes."""
    notes: list[str] = []
    kept: list[tuple[str, list[float], list[float]]] = []
    dropped = 0
    for c in curves:
        if log_y:
            pairs = [(x, math.log10(y)) for x, y in zip(c.xs, c.ys, strict=True) if y > 0]
            dropped += len(c.xs) - len(pairs)
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            xs, ys = list(c.xs), list(c.ys)
        if xs:
            kept.append((c.colour, xs, ys))
    if dropped:
        notes.append(f"log scale: {dropped} point{'s' if dropped != 1 else ''} at or below 0 "
                     "left out")
    if not kept:
        why = "every value is at or below 0: no log scale" if dropped else "no points"
        return Drawn(message(width, height, why).rows, notes)
    ylow = min(min(ys) for _, _, ys in kept)
    yhigh = max(max(ys) for _, _, ys in kept)
    margin = LABEL_WIDTH
    plot_w, plot_h = _room(width, height, margin)
    if plot_w < MIN_PLOT[0] or plot_h < MIN_PLOT[1]:
        return Drawn(message(width, height, "too small to draw").rows, notes)
    low, high, ylabels = _y_axis(ylow, yhigh, plot_h, log_y)
    margin = min(max(t.cell_len for t in ylabels), LABEL_WIDTH)
    plot_w = width - margin - 1
    xlow, xhigh, xticks = _x_ticks(min(min(xs) for _, xs, _ in kept),
                                   max(max(xs) for _, xs, _ in kept), plot_w,
                                   whole=whole_x)
    canvas = Canvas(plot_w, plot_h)
    ax, bx = _scale(xlow, xhigh, 2 * plot_w)
    ay, by = _scale(low, high, 4 * plot_h)
    top = 4 * plot_h - 1
    for colour, xs, ys in reversed(kept):
        canvas.line([ax * x + bx for x in xs], [top - (ay * y + by) for y in ys], colour)
    return Drawn(_frame(canvas.rows(), ylabels, xticks, x_title, width), notes)


def scatter(dots: Sequence[Dot], width: int, height: int, *, x_title: str,
            log_x: bool = False) -> Drawn:
    """One marker per dot; x numeric (with `log_x`, on a log axis: powers of ten apart, and
    the axis title says so), or (any category among the xs) every x a category at evenly
    spaced places in the order given by sorting their text."""
    if not dots:
        return message(width, height, "no trial has a value to show")
    ys = [d.y for d in dots]
    plot_h = height - FRAME_ROWS
    if plot_h < MIN_PLOT[1] or width - LABEL_WIDTH - 1 < MIN_PLOT[0]:
        return message(width, height, "too small to draw")
    low, high, ylabels = _y_axis(min(ys), max(ys), plot_h, False)
    margin = min(max(t.cell_len for t in ylabels), LABEL_WIDTH)
    plot_w = width - margin - 1
    numeric = all(isinstance(d.x, int | float) and not isinstance(d.x, bool) for d in dots)
    log_x = log_x and numeric and all(float(d.x) > 0 for d in dots)
    if numeric and log_x:
        xs = [math.log10(float(d.x)) for d in dots]
        xlow, xhigh = _padded(min(xs), max(xs), 0.05) if max(xs) > min(xs) else (
            min(xs) - 0.5, max(xs) + 0.5)
        ax, bx = _scale(xlow, xhigh, plot_w)
        found, texts = _log_ticks(xlow, xhigh, max(plot_w // X_LABEL_EVERY, 2) * 2)
        xticks = [(round(ax * t + bx), lab) for t, lab in zip(found, texts, strict=True)]
        cols = [round(ax * x + bx) for x in xs]
        x_title = f"{x_title} — log scale"
    elif numeric:
        xs = [float(d.x) for d in dots]
        # no dot on the axis itself
        xlow, xhigh, xticks = _x_ticks(*_padded(min(xs), max(xs), 0.05), plot_w)
        ax, bx = _scale(xlow, xhigh, plot_w)
        cols = [round(ax * x + bx) for x in xs]
    else:
        names = sorted({str(d.x) for d in dots})
        slot = plot_w / len(names)
        place = {n: int(slot * i + slot / 2) for i, n in enumerate(names)}
        cols = [place[str(d.x)] for d in dots]
        xticks = [(place[n], clean(n)[:max(int(slot) - 1, 1)]) for n in names]
    canvas = Canvas(plot_w, plot_h)
    ay, by = _scale(low, high, plot_h)
    for d, col in reversed(list(zip(dots, cols, strict=True))):
        canvas.mark(col, plot_h - 1 - round(ay * d.y + by), "●", d.colour)
    return Drawn(_frame(canvas.rows(), ylabels, xticks, x_title, width))


@dataclass(frozen=True)
class Axis:
    """One axis of parallel coordinates: its name, and how values are placed on it: linear,
    `log` (values > 0, powers of ten apart) or, with `categories`, each value the index of
    its category in that list (spread evenly along the axis, each labelled)."""

    name: str
    log: bool = False
    categories: tuple[str, ...] = ()


def parallel(axes: Sequence[Axis | str], lines: Sequence[tuple[str, Sequence[float]]],
             width: int, height: int) -> Drawn:
    """Parallel coordinates: an axis per entry of `axes` (left to right), each scaled to its
    own range (log or categorical as the axis says), and per line (colour, a value per axis)
    a polyline across them; each numeric axis's range under and over it, each category at
    its place beside its axis, the names at the bottom."""
    specs = [a if isinstance(a, Axis) else Axis(a) for a in axes]
    if len(specs) < 2 or not lines:
        return message(width, height, "parallel coordinates need at least two values "
                                      "and one trial")
    plot_h = height - 3  # the top values above, the bottom values and the names below
    if plot_h < MIN_PLOT[1] or width < 4 * len(specs):
        return message(width, height, "too small to draw")
    placed = [[_placed(spec, v) for spec, v in zip(specs, values, strict=True)]
              for _, values in lines]
    ranges = [(min(p[i] for p in placed), max(p[i] for p in placed))
              if not spec.categories else (0.0, float(max(len(spec.categories) - 1, 1)))
              for i, spec in enumerate(specs)]
    gap = (width - 1) / (len(specs) - 1)
    cols = [min(round(gap * i), width - 1) for i in range(len(specs))]
    canvas = Canvas(width, plot_h)
    top = 4 * plot_h - 1
    for (colour, _), values in reversed(list(zip(lines, placed, strict=True))):
        ys = [top - top * _fraction(v, lo, hi) for v, (lo, hi) in zip(values, ranges,
                                                                       strict=True)]
        canvas.line([2 * c for c in cols], ys, colour)
    for c in cols:
        for r in range(plot_h):
            if not canvas.dots[r * width + c]:
                canvas.mark(c, r, "│", "bright_black")
    slot = max(int(gap) - 1, 3)
    for spec, c, (lo, hi) in zip(specs, cols, ranges, strict=True):
        for i, name in enumerate(spec.categories):  # each category beside its place
            row = round((plot_h - 1) * (1 - _fraction(i, lo, hi)))
            label = clean(name)[:slot - 1]
            start = c + 1 if c + 1 + len(label) <= width else c - len(label)
            for j, ch in enumerate(label):
                canvas.mark(start + j, row, ch, "bright_black")

    def labelled(texts: list[str]) -> Text:
        cells = [" "] * width
        for c, t in zip(cols, texts, strict=True):
            t = clean(t)[:slot]
            start = max(min(c - len(t) // 2, width - len(t)), 0)
            cells[start:start + len(t)] = list(t)
        return Text("".join(cells), end="", style=AXIS)

    def bound(spec: Axis, value: float) -> str:
        if spec.categories:
            return ""
        return _pow10(value) if spec.log else f"{value:.3g}"

    return Drawn([labelled([bound(s, hi) for s, (_, hi) in zip(specs, ranges, strict=True)]),
                  *canvas.rows(),
                  labelled([bound(s, lo) for s, (lo, _) in zip(specs, ranges, strict=True)]),
                  labelled([f"{s.name} (log)" if s.log else s.name for s in specs])])


def _placed(spec: Axis, value: float) -> float:
    return math.log10(value) if spec.log and value > 0 else value
