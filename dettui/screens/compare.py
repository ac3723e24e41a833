"""Compare trials of one experiment: their curves of one metric overlaid on one chart (each in
its trial's colour, the colour of its row marker in the trials table), a legend with each
trial's last and best value and hyperparameters, a hyperparameter-vs-metric scatter and, on a
wide terminal, parallel coordinates of the numeric hyperparameters and the metric.

Reads: per trial, each metric of the group downsampled by the master to about the chart's
width (`metric_series`), a few trials at a time; then, as the experiment's feed says a trial
moved on, only its reports past what was read (`metrics(after_steps=...)`), appended. The x
axis in time reads a few report times per trial (`metric_times`) and interpolates between."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, ClassVar

from rich.style import Style
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Header

from dettui import series
from dettui.screens.base import ApiScreen, Row, state_text
from dettui.widgets.chart_data import (
    at_times,
    epoch,
    fmt,
    higher_is_better,
    number,
    time_unit,
)
from dettui.widgets.keybar import KeyBar
from dettui.widgets.overlay import Figure
from dettui.widgets.plot import Axis, Curve, Dot, overlay, parallel, scatter
from dettui.widgets.rowtable import Column, RowTable
from dettui.widgets.safe import Plain
from dettui.widgets.trial_colours import colour
from dettui.widgets.trial_table import flatten as flat

Points = list[tuple[float, float]]
MAX_TRIALS = 100  # trials compared at once (the first of the selection)
READS_AT_ONCE = 8  # trials read at the same time
MAX_POINTS = 1000  # points per series read at most (else twice the screen's width)
MIN_POINTS = 20
TIME_ANCHORS = 16  # report times read per trial for a time axis (a small page each)
TIMES_AT_ONCE = 2  # trials whose times are read at the same time (32 pages at most)
APPEND_EVERY = 1.0  # seconds between two reads of new reports (bursts are merged)
WIDE = 120  # columns parallel coordinates need
HPARAMS_CAP = 400  # cells the legend's hyperparameters take at most (the rest of the width)
LOG_DECADES = 2  # positive values spanning more decades than this are drawn on a log axis


def log_hparams(config: Any, prefix: str = "") -> set[str]:
    """Flat names (`optimizer.lr`) of the hyperparameters an experiment's config searches
    on a log scale (`type: log`)."""
    out: set[str] = set()
    for name, spec in (config or {}).items() if isinstance(config, dict) else ():
        if not isinstance(spec, dict):
            continue
        if spec.get("type") == "log":
            out.add(f"{prefix}{name}")
        elif "type" not in spec:
            out |= log_hparams(spec, f"{prefix}{name}.")
    return out


def wide_spread(values: Iterable[float]) -> bool:
    """All positive and more than LOG_DECADES decades apart: a log axis reads them."""
    vs = list(values)
    return bool(vs) and min(vs) > 0 and max(vs) / min(vs) > 10 ** LOG_DECADES


def _why(exc: BaseException) -> str:
    """An error in a few words: a DettuiError's message, else its text or its type's name."""
    return str(getattr(exc, "message", None) or exc or type(exc).__name__)


class CompareScreen(ApiScreen):
    TABLE = "#legend"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("m", "next_metric", "Metric"),
        Binding("g", "toggle_group", "Train/valid"),
        Binding("x", "toggle_x", "Batches/time"),
        Binding("L", "toggle_log", "Log y"),
        Binding("h", "scatter", "Hparam scatter"),
        Binding("P", "parallel", "Parallel coords"),
        Binding("o", "overlay", "Curves"),
    ]
    DEFAULT_CSS = """
    CompareScreen #title { background: $boost; padding: 0 1; text-style: bold;
                           text-wrap: nowrap; text-overflow: ellipsis; }
    CompareScreen #status { padding: 0 1; color: $text-warning; text-wrap: nowrap;
                            text-overflow: ellipsis; height: auto; }
    CompareScreen #chart { height: 1fr; }
    CompareScreen #legend { height: auto; max-height: 35%; }
    """

    view: reactive[str] = reactive("overlay", init=False)  # overlay | scatter | parallel
    log_y: reactive[bool] = reactive(False, init=False)
    x_time: reactive[bool] = reactive(False, init=False)

    def __init__(self, exp_id: int, trial_ids: list[int], *, metric: str, group: str,
                 smaller_is_better: bool) -> None:
        super().__init__()
        self.exp_id = exp_id
        self.trial_ids = list(dict.fromkeys(trial_ids))[:MAX_TRIALS]
        self.left_out = len(dict.fromkeys(trial_ids)) - len(self.trial_ids)
        self.keys = [str(t) for t in self.trial_ids]
        self.position = {k: i for i, k in enumerate(self.keys)}
        self.metric, self.group, self.smaller_is_better = metric, group, smaller_is_better
        self.opened_with = metric  # the metric smaller_is_better is about
        self.names: list[str] = []  # the group's metrics, of every trial read
        self.hparam = ""  # the scatter's x
        self.trials: dict[str, dict[str, Any]] = {}  # as the experiment's feed sends them
        self.series: dict[str, dict[str, Points]] = {}  # trial -> metric -> (steps, value)
        self.cursor: dict[str, int] = {}  # trial -> steps read up to
        self.failed: dict[str, str] = {}  # trial -> why its metrics were not read
        self.times: dict[str, list[tuple[float, float]]] = {}  # trial -> (steps, epoch)
        self.time_failed: dict[str, str] = {}
        self.restarts: dict[str, int] = {}  # as when the trial's series was read
        self.pending: set[str] = set()  # trials with new reports to append
        self.appending = False
        self.reads = {"series": 0, "appended": 0, "times": 0}  # what was read, for tests
        self.log_names: set[str] = set()  # hyperparameters the config searches on a log scale

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain(f"Experiment {self.exp_id}: comparing {len(self.keys)} trials", id="title")
        yield Plain("", id="status")
        yield Figure(id="chart")
        columns = [Column("pos", "#", width=3, align="right"),
                   Column("trial", "Trial", width=8),
                   Column("state", "State", width=10, priority=2),
                   Column("last", "Last", width=10, align="right"),
                   Column("best", "Best", width=10, align="right"),
                   Column("hparams", "Hyperparameters", priority=1, cap=HPARAMS_CAP)]
        yield RowTable(columns, id="legend")
        yield KeyBar()

    @property
    def chart(self) -> Figure:
        return self.query_one("#chart", Figure)

    def on_mount(self) -> None:
        legend = self.table
        legend.sort_by("pos")
        legend.set_rows(self._row(k) for k in self.keys)
        legend.focus()
        if self.left_out:
            self.notify(f"comparing the first {MAX_TRIALS} trials selected "
                        f"({self.left_out} left out)", severity="warning")
        self._redraw()
        self.load_series()
        self.load_config()
        self.follow()

    @work(exclusive=True, group="config")
    async def load_config(self) -> None:
        """Which hyperparameters the experiment searches on a log scale (its config)."""
        try:
            experiment = await self.client.experiment(self.exp_id)
        except Exception:  # noqa: BLE001 - the spread of the values decides then
            return
        config = experiment.get("config") if isinstance(experiment, dict) else None
        self.log_names = log_hparams((config or {}).get("hyperparameters"))
        if self.live and self.view != "overlay":
            self._redraw()

    def _log_axis(self, name: str, values: Iterable[float]) -> bool:
        vs = list(values)
        return bool(vs) and min(vs) > 0 and (name in self.log_names or wide_spread(vs))

    def _width(self) -> int:
        return max(MIN_POINTS, min(MAX_POINTS, 2 * self.app.size.width))

    # -- reads -------------------------------------------------------------------------------

    async def _each(self, keys: Iterable[str], read: Callable[[str], Awaitable[None]],
                    at_once: int = READS_AT_ONCE) -> None:
        """`read` each trial, `at_once` at a time."""
        gate = asyncio.Semaphore(at_once)

        async def one(key: str) -> None:
            async with gate:
                await read(key)

        await asyncio.gather(*(one(k) for k in keys))

    @work(exclusive=True, group="series")
    async def load_series(self) -> None:
        """Every trial's series of the group (after `g`: the other group's)."""
        group = self.group
        await self._each(self.keys, lambda key: self._read_series(key, group))
        if self.live and group == self.group:
            self._redraw()
            if self.x_time:
                self.load_times()

    @work(group="reread")
    async def reread(self, key: str) -> None:
        """One trial read again: it restarted (its reports may roll back) or was not read."""
        await self._read_series(key, self.group)
        if self.live:
            self._redraw()

    async def _read_series(self, key: str, group: str) -> None:
        restarts = int(self.trials.get(key, {}).get("restarts") or 0)
        try:
            got = await self.client.metric_series(int(key), group, self._width())
            points = {str(s["name"]): list(zip(s["steps"], s["values"], strict=True))
                      for s in got["series"]}
        except Exception as exc:  # noqa: BLE001 - said in the legend, never raised
            if group == self.group:
                self.failed[key] = _why(exc)
                self.series.pop(key, None)
            return
        if group != self.group:
            return  # `g` meanwhile: the other group is being read
        self.reads["series"] += 1
        self.failed.pop(key, None)
        self.series[key] = points
        self.cursor[key] = got["lastSteps"] if got.get("lastSteps") is not None else -1
        self.restarts[key] = restarts

    @work(group="append")
    async def append(self) -> None:
        """The reports of the trials that moved on, past what was read; at most one read per
        trial every APPEND_EVERY seconds however often the feed says so."""
        if self.appending:
            return
        self.appending = True
        try:
            while self.pending and self.live:
                keys, self.pending = sorted(self.pending), set()
                group = self.group
                await self._each(keys, functools.partial(self._append_one, group=group))
                if self.live and group == self.group:
                    self._redraw()
                await asyncio.sleep(APPEND_EVERY)
        finally:
            self.appending = False

    async def _append_one(self, key: str, group: str) -> None:
        if key not in self.series:
            return
        try:
            new = await self.client.metrics(int(key), group, after_steps=self.cursor[key])
        except Exception:  # noqa: BLE001 - what was read stays; the trial's next change (or
            return         # the master's return after an outage) reads from the same cursor
        if group != self.group or key not in self.series or not new:
            return
        self.reads["appended"] += len(new)
        points = self.series[key]
        for r in new:
            steps = int(r["stepsCompleted"])
            self.cursor[key] = max(self.cursor[key], steps)
            for name, v in ((r.get("metrics") or {}).get("avgMetrics") or {}).items():
                if number(v) is not None:
                    points.setdefault(name, []).append((steps, float(v)))
            when = epoch(str(r.get("reportTime")))
            if key in self.times and when is not None:
                self.times[key].append((steps, when))
        width = self._width()
        for name, p in points.items():
            if len(p) > 2 * width:
                points[name] = series.downsample(p, width)

    @work(exclusive=True, group="times")
    async def load_times(self) -> None:
        """A few report times per trial (those not read yet), for the time axis."""
        group = self.group
        await self._each([k for k in self.keys if k in self.series and k not in self.times],
                         lambda key: self._read_times(key, group), TIMES_AT_ONCE)
        if self.live and group == self.group:
            self._redraw()

    async def _read_times(self, key: str, group: str) -> None:
        try:
            got = await self.client.metric_times(int(key), group, TIME_ANCHORS)
        except Exception as exc:  # noqa: BLE001 - said in the legend
            self.time_failed[key] = _why(exc)
            return
        if group == self.group:
            self.reads["times"] += 1
            self.time_failed.pop(key, None)
            self.times[key] = sorted((s, e) for s, stamp in got
                                     if (e := epoch(stamp)) is not None)

    @work(exclusive=True, group="feed")
    async def follow(self) -> None:
        """The experiment's trials (state, hyperparameters, progress) as the master pushes
        them: the legend's rows, and the cue to append a trial's new reports."""
        await self.feed(f"experiment:{self.exp_id}", self.table, self._legend_rows)

    def _legend_rows(self, trials: list[dict[str, Any]]) -> list[Row]:
        rows = []
        for t in trials:
            key = str(t.get("id"))
            if key not in self.position:
                continue
            before = self.trials.get(key)
            self.trials[key] = t
            if before is not None and before != t:
                self._moved_on(key, t)
            rows.append(self._row(key))
        return rows

    def _moved_on(self, key: str, trial: dict[str, Any]) -> None:
        """A trial changed: read again what a restart may have rolled back or what could not
        be read; else append its new reports."""
        if key in self.failed or (key in self.series and
                                  int(trial.get("restarts") or 0) != self.restarts.get(key)):
            self.reread(key)
        elif key in self.series:
            self.pending.add(key)

    def on_feed(self, topic: str) -> None:
        legend = self.table
        missing = [self._row(k) for k in self.keys if legend.row(k) is None]
        if missing:  # a snapshot lists the experiment's trials: a selected one it lacks stays
            legend.apply(upsert=missing)
        if self.pending:
            self.append()
        if self.view != "overlay":
            self._redraw()  # hyperparameters and states came

    def reconnected(self) -> None:
        self.pending.update(k for k in self.keys if k in self.series)
        self.append()

    # -- what is shown -----------------------------------------------------------------------

    def _shown_metric(self) -> str:
        names = sorted({n for s in self.series.values() for n in s})
        self.names = names
        return self.metric if self.metric in names or not names else names[0]

    def _values(self, key: str, metric: str) -> list[float]:
        return [v for _, v in self.series.get(key, {}).get(metric, [])]

    def _smaller(self, metric: str) -> bool:
        """Whether lower is better: the searcher's word for its own metric (the one the
        screen was opened with); for another, what its name says (accuracy: higher)."""
        if metric == self.opened_with or not metric:
            return self.smaller_is_better
        return not higher_is_better(metric)

    def _best(self, values: list[float], metric: str) -> float | None:
        if not values:
            return None
        return min(values) if self._smaller(metric) else max(values)

    def _row(self, key: str) -> Row:
        i = self.position[key]
        metric = self._shown_metric()
        values = self._values(key, metric)
        t = self.trials.get(key, {})
        note: Any = ", ".join(f"{k}={fmt(v)}" for k, v in flat(t.get("hparams")).items())
        why = self.failed.get(key) or (self.time_failed.get(key) if self.x_time else None)
        if why:
            what = "metrics" if key in self.failed else "report times"
            note = (f"trial {key}: {what} not read ({why})", Style(color="red"))
        elif key not in self.series:
            note = ("reading…", Style(dim=True))
        elif not values:
            note = (f"no {metric or 'metrics'} ({self.group}) yet; {note}", Style(dim=True))
        return key, {"pos": (i + 1, Style(color=colour(i), bold=True)),
                     "trial": (f"● {key}", Style(color=colour(i), bold=True)),
                     "state": state_text(t.get("state")) or "?",
                     "last": fmt(values[-1] if values else None),
                     "best": fmt(self._best(values, metric)), "hparams": note}

    def _redraw(self) -> None:
        """Title, legend, chart and status for the metric, group, axes and view chosen."""
        if not self.is_mounted:
            return
        metric = self._shown_metric()
        self.table.apply(upsert=[self._row(k) for k in self.keys])
        notes = [f"trial {k}: metrics not read ({self.failed[k]})" for k in self.keys
                 if k in self.failed]
        notes += self.DRAW[self.view](self, metric)
        if self.view == "overlay" and self.chart.size.area:
            notes += self.chart.notes
        what = {"overlay": f"x {'time' if self.x_time else 'batches'}, y "
                           f"{'log' if self.log_y else 'linear'}",
                "scatter": f"best by {self.hparam or '?'}",
                "parallel": "parallel coordinates"}[self.view]
        best = "min" if self._smaller(metric) else "max"
        self.show("#title", f"{metric or '?'} ({self.group}, best = {best}); {what}; "
                  f"{len(self.keys)} trials of experiment {self.exp_id}")
        self.show("#status", "; ".join(notes))
        self.query_one("#status").display = bool(notes)

    def _no_curve(self, metric: str) -> str:
        if not self.keys:
            return "no trials to compare: select some on the experiment's trials (space, T)"
        if len(self.failed) == len(self.keys):
            return "no curve: no trial's metrics could be read (see the legend)"
        if len(self.series) + len(self.failed) < len(self.keys):
            return f"reading the metrics of {len(self.keys)} trials…"
        return f"no trial has reported {metric or 'metrics'} ({self.group}) yet"

    def _draw_overlay(self, metric: str) -> list[str]:
        notes: list[str] = []
        curves, spans = [], []
        for key in self.keys:
            points = self.series.get(key, {}).get(metric, [])
            if not points:
                continue
            if self.x_time:
                anchors = self.times.get(key)
                if not anchors:
                    continue
                start = epoch(str(self.trials.get(key, {}).get("startTime"))) or anchors[0][1]
                xs = at_times(points, anchors, start)
                spans.append(max(xs))
            else:
                xs = [p[0] for p in points]
            curves.append(Curve(colour(self.position[key]), xs, [p[1] for p in points]))
        title = "batches"
        if self.x_time:
            span = max(spans, default=0.0)
            unit, word = time_unit(span)
            curves = [Curve(c.colour, [x / unit for x in c.xs], c.ys) for c in curves]
            title = (f"{word} since each trial started (interpolated between {TIME_ANCHORS} "
                     "report times each)")
            waiting = [k for k in self.keys if k in self.series and k not in self.times
                       and k not in self.time_failed]
            if waiting:
                notes.append(f"reading report times of {len(waiting)} trials…")
        if not curves:
            timeless = [k for k in self.keys if self.series.get(k, {}).get(metric)]
            if self.x_time and timeless:  # points there are, but no time to place them at
                failed = [f"trial {k}: report times not read ({self.time_failed[k]})"
                          for k in timeless if k in self.time_failed]
                self.chart.say("; ".join(failed) if len(failed) == len(timeless) else
                               f"reading the report times of {len(timeless)} trials…")
            else:
                self.chart.say(self._no_curve(metric))
            return notes
        log, whole = self.log_y, not self.x_time
        self.chart.show(lambda w, h: overlay(curves, w, h, log_y=log, x_title=title,
                                             whole_x=whole))
        return notes

    def _hparam_names(self) -> list[str]:
        return sorted({n for t in self.trials.values() for n in flat(t.get("hparams"))})

    def _draw_scatter(self, metric: str) -> list[str]:
        names = self._hparam_names()
        if not names:
            self.chart.say("no hyperparameters read yet" if len(self.trials) < len(self.keys)
                           else "these trials have no hyperparameters")
            return []
        if self.hparam not in names:
            self.hparam = names[0]
        dots = []
        for key in self.keys:
            value = flat(self.trials.get(key, {}).get("hparams")).get(self.hparam)
            best = self._best(self._values(key, metric), metric)
            if value is not None and best is not None:
                x: float | str = number(value) if number(value) is not None else str(value)
                dots.append(Dot(colour(self.position[key]), x, best))
        if not dots:
            self.chart.say(self._no_curve(metric))
            return []
        title = f"{self.hparam} (h: next of {len(names)}); y: each trial's best {metric}"
        numbers = [d.x for d in dots if isinstance(d.x, float)]
        log = len(numbers) == len(dots) and self._log_axis(self.hparam, numbers)
        self.chart.show(lambda w, h: scatter(dots, w, h, x_title=title, log_x=log))
        return []

    def _draw_parallel(self, metric: str) -> list[str]:
        width = self.size.width or self.app.size.width
        if width < WIDE:
            text = (f"parallel coordinates need a terminal at least {WIDE} columns wide "
                    f"(this one has {width})")
            self.chart.say(text)
            return [text]
        rows = []
        for key in self.keys:
            best = self._best(self._values(key, metric), metric)
            if best is not None:
                rows.append((key, flat(self.trials.get(key, {}).get("hparams")), best))
        axes: list[Axis] = []
        columns: list[list[float]] = []
        for name in self._hparam_names() if rows else []:
            values = [h.get(name) for _, h, _ in rows]
            if any(v is None for v in values):
                continue  # a trial without it: no place on its axis
            numbers = [number(v) for v in values]
            if all(n is not None for n in numbers):
                got = [n for n in numbers if n is not None]
                axes.append(Axis(name, log=self._log_axis(name, got)))
                columns.append(got)
            else:  # categories (optimizer): spread along the axis, in their text's order
                texts = [fmt(v) for v in values]
                kinds = sorted(set(texts))
                axes.append(Axis(name, categories=tuple(kinds)))
                columns.append([float(kinds.index(t)) for t in texts])
        lines = [(colour(self.position[k]), [*(c[i] for c in columns), best])
                 for i, (k, _, best) in enumerate(rows)]
        axes.append(Axis(f"best {metric}"))
        self.chart.show(lambda w, h: parallel(axes, lines, w, h))
        return []

    DRAW: ClassVar[dict[str, Callable[[CompareScreen, str], list[str]]]] = {
        "overlay": _draw_overlay, "scatter": _draw_scatter, "parallel": _draw_parallel}

    def watch_view(self) -> None:
        self._redraw()

    def watch_log_y(self) -> None:
        self._redraw()

    def watch_x_time(self, x_time: bool) -> None:
        if x_time:
            self.load_times()
        self._redraw()

    def on_resize(self, event: events.Resize) -> None:
        """Parallel coordinates may (no longer) fit; the chart's notes are of its size."""
        self.call_after_refresh(self._redraw)

    @on(RowTable.Selected, "#legend")
    def _open_logs(self, event: RowTable.Selected) -> None:
        """Enter on a trial of the legend: its logs."""
        from dettui.screens.logs import LogsScreen

        self.app.push_screen(LogsScreen(int(event.key)))

    # -- keys --------------------------------------------------------------------------------

    def action_next_metric(self) -> None:
        shown = self._shown_metric()
        if not self.names:
            self.notify("no metrics read yet", severity="warning")
            return
        i = self.names.index(shown) if shown in self.names else -1
        self.metric = self.names[(i + 1) % len(self.names)]
        self._redraw()

    def action_toggle_group(self) -> None:
        self.group = "training" if self.group == "validation" else "validation"
        for store in (self.series, self.cursor, self.failed, self.times, self.time_failed):
            store.clear()
        self.pending.clear()
        self._redraw()
        self.load_series()

    def action_toggle_x(self) -> None:
        self.x_time = not self.x_time

    def action_toggle_log(self) -> None:
        self.log_y = not self.log_y
        if self.view != "overlay":
            self.notify("the log scale applies to the curves (o)", timeout=3)

    def action_scatter(self) -> None:
        if self.view == "scatter":
            names = self._hparam_names()
            if names:
                i = names.index(self.hparam) if self.hparam in names else -1
                self.hparam = names[(i + 1) % len(names)]
            self._redraw()
        self.view = "scatter"

    def action_parallel(self) -> None:
        self.view = "parallel"

    def action_overlay(self) -> None:
        self.view = "overlay"
