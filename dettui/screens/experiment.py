"""One experiment: its trials live (a column per hyperparameter, the searcher metric's best and
latest, the other metrics, CPU and memory while running; sortable, filterable with
`lr>0.01 state:completed`, ⇣ on trials the searcher stopped early), a selection of trials to
compare, a metric chart of the highlighted trial, and its checkpoints with the GC policy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from rich.cells import cell_len
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import ActiveBinding, Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Header, Input
from textual_plotext import PlotextPlot

from dettui import byte_size, series
from dettui.errors import DettuiError
from dettui.screens.base import ApiScreen, Row, counted, progress_text, state_text
from dettui.widgets.keybar import KeyBar
from dettui.widgets.rowtable import Column, FilterError, RowTable
from dettui.widgets.safe import Plain, PlainInput
from dettui.widgets.ticks import axis
from dettui.widgets.trial_table import MAX_HPARAMS, SELECTED, STOPPED, TrialTable, ranked

CHART_FRAME = 4  # rows of the chart that are not the plot's: its borders, x labels, x title
CKPT_ROWS = 200  # checkpoints listed (the newest); the header says how many there are
CHART_MIN_POINTS = 20  # points per metric a chart reads at least (else its width)
UUID_SHORT = 8  # a narrow checkpoints panel shows this much of a UUID (`y`, `d` use it all)
UUID_FULL = 36
CKPT_REST = [  # after Trial and UUID; the metric as wide as its values need (never cut)
    Column("steps", "Steps", align="right", priority=1),
    Column("metric", "Metric", align="right", priority=2),
    Column("state", "State", width=10, priority=3),
]
CKPT_FULL_WIDTH = 5 + UUID_FULL + 6 + 10 + 8 + 2 * 4 + 2  # the columns, gaps, a scrollbar


def ckpt_columns(width: int) -> list[Column]:
    """The checkpoints panel's columns for `width` cells: the whole UUID where every
    column fits beside it, else its first UUID_SHORT characters."""
    uuid = Column("uuid", "UUID") if width >= CKPT_FULL_WIDTH else \
        Column("uuid8", "UUID", width=UUID_SHORT)
    return [Column("trial", "Trial", width=5, align="right"), uuid, *CKPT_REST]


# Each experiment's sort and filter (column, reverse, filter text), kept while the dashboard
# runs: reopening an experiment shows its trials as they were left.
VIEWS: WeakKeyDictionary[App[Any], dict[int, tuple[str | None, bool, str]]] = \
    WeakKeyDictionary()


def _value(block: dict[str, Any] | None, metric: str) -> Any:
    return (((block or {}).get("metrics") or {}).get("avgMetrics") or {}).get(metric)


def _fmt(value: Any) -> str:
    return f"{value:.5g}" if isinstance(value, int | float) else ""


MAX_SELECTED = 100  # trials selected for compare at most
TOP_DEFAULT, COMPARE_DEFAULT = 5, 10  # `T` offers the top 5; `C` with none selected: top 10
FILTER_HINT = ("filter: text, column:text or a comparison, all must hold (lr>0.01 "
               "state:completed loss<=0.5); Enter applies, Escape clears")


class ExperimentScreen(ApiScreen):
    TABLE = "#trials"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("l", "logs", "Logs"),
        Binding("space", "toggle_selected", "Select", tooltip="Select the trial to compare"),
        Binding("C", "compare", "Compare"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort_next", "Sort"),
        Binding("S", "sort_by", "Sort by…"),
        Binding("r", "sort_reverse", "Reverse"),
        Binding("T", "top", "Top N…"),
        Binding("y", "yank", "Copy id"),
        Binding("tab", "toggle_focus", "Checkpoints/Trials",
                tooltip="Move between the trials and the checkpoints (y copies, d downloads "
                        "the highlighted one)"),
        Binding("m", "next_metric", "Metric"),
        Binding("g", "toggle_group", "Train/valid"),
        Binding("p", "control('pause')", "Pause"),
        Binding("a", "control('activate')", "Activate"),
        Binding("c", "control('cancel')", "Cancel…"),
        Binding("x", "control('kill')", "Kill…"),
        Binding("d", "download", "Download"),
    ]
    DEFAULT_CSS = """
    ExperimentScreen #title, ExperimentScreen .section { background: $boost; padding: 0 1;
                                                          text-style: bold; }
    ExperimentScreen #trials { height: 1fr; }
    ExperimentScreen #filter.-refused { border: tall $error; }
    ExperimentScreen #legend { height: 1; text-wrap: nowrap; text-overflow: ellipsis;
                               color: $text-muted; padding: 0 1; }
    ExperimentScreen #lower { height: 1fr; }
    ExperimentScreen #plot { width: 2fr; }
    ExperimentScreen #chart-title { width: 100%; text-align: center; text-wrap: nowrap;
                                    text-overflow: ellipsis; }
    ExperimentScreen #chart { height: 1fr; }
    ExperimentScreen #ckpts { width: 1fr; min-width: 34; }
    ExperimentScreen #checkpoints { height: 1fr; }
    """

    def __init__(self, exp_id: int) -> None:
        super().__init__()
        self.exp_id = exp_id
        self.experiment: dict[str, Any] = {}
        self.metric = ""  # the metric chosen (`m`), else the searcher's
        self.charted = ""  # the metric the chart shows: the chosen one, else the group's first
        self.group = "validation"
        self.names: list[str] = []
        # The chart's data: per metric, its points so far (downsampled to the chart's width),
        # of (trial, group, restarts) `chart_of`, read up to steps `cursor`; new reports are
        # read past the cursor and appended, never the whole history again.
        self.chart_of: tuple[str, str, int] | None = None
        self.points: dict[str, list[tuple[float, float]]] = {}
        self.cursor = -1
        self.chart_reads = {"series": 0, "appended": 0}  # what was read, for the tests
        self.ckpt_marks: dict[str, tuple[Any, Any]] = {}  # trial -> (count, bytes) of its
        self.ckpt_shown: object = None                   # checkpoints; and as last listed
        self.restarts: dict[str, int] = {}
        self.trials: dict[str, dict[str, Any]] = {}  # the trials as last read, by key
        self.columns = TrialTable()
        self.selected: list[str] = []  # trials selected to compare, in the order picked
        self.restored = False  # the sort and filter this experiment had were put back

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain(f"Experiment {self.exp_id}: loading…", id="title")
        yield self.filter_box()
        yield RowTable(self.columns.columns(), id="trials")
        yield Plain("loading trials…", id="legend")
        with Horizontal(id="lower"):
            with Vertical(id="plot"):
                yield Plain("loading…", id="chart-title")  # not plotext's: it drops a long one
                yield PlotextPlot(id="chart")
            with Vertical(id="ckpts"):
                yield Plain("Checkpoints", classes="section", id="gc")
                yield RowTable(ckpt_columns(0), id="checkpoints")
        yield KeyBar()

    def on_mount(self) -> None:
        self.table.focus()
        self.load()

    @work(exclusive=True, group="load")
    async def load(self) -> None:
        try:
            self.experiment = await self.client.experiment(self.exp_id)
        except Exception as exc:  # noqa: BLE001 - shown, not raised
            self.notify(str(exc), title=f"experiment {self.exp_id}", severity="error")
            return
        if not self.live:
            return
        searcher = (self.experiment.get("config") or {}).get("searcher") or {}
        self.metric = self.metric or str(searcher.get("metric") or "")
        self.columns.metric = str(searcher.get("metric") or "")
        self._title()
        self.refresh_checkpoints()
        await self.feed(f"experiment:{self.exp_id}", self.table, self._trial_rows)

    def _trial_rows(self, trials: list[dict[str, Any]]) -> list[Row]:
        """The trials' rows; and what says their checkpoints or their runs changed."""
        for t in trials:
            key = str(t["id"])
            self.ckpt_marks[key] = (t.get("checkpointCount"), t.get("totalCheckpointSize"))
            self.restarts[key] = int(t.get("restarts") or 0)
            self.trials[key] = t
        if self.columns.see(trials):
            self.table.set_columns(self.columns.columns())
        return [(str(t["id"]), self._row(t)) for t in trials]

    def _row(self, t: dict[str, Any]) -> dict[str, Any]:
        key = str(t["id"])
        return self.columns.row(t, self.selected.index(key) if key in self.selected else None)

    def _title(self) -> None:
        e = self.experiment
        progress = progress_text(e.get("state"), e.get("progress"))
        self.show("#title", f"Experiment {self.exp_id} {e.get('name', '')}: ",
                  state_text(e.get("state")), f", {progress} done" if progress else "",
                  f" — metric {self.charted or self.metric or '?'} ({self.group})",
                  *_warned(e))

    @work(exclusive=True, group="header")
    async def refresh_header(self) -> None:
        """The experiment's state and progress move with its trials (pause, end, progress)."""
        try:
            experiment = await self.client.experiment(self.exp_id)
        except DettuiError:
            return  # the last one known stays; the feed goes on
        if self.live:
            self.experiment = experiment
            self._title()

    def reconnected(self) -> None:
        """After an outage: read the experiment again (all of it, if it was never read), and
        its checkpoints (the feed's snapshot brings the trials and the chart)."""
        if not self.experiment:
            self.load()
            return
        self.ckpt_shown = None
        self.refresh_checkpoints()
        self.refresh_header()

    def on_feed(self, topic: str) -> None:
        if not self.restored:
            self._restore_view()
        self._legend()
        if self.table.cursor_key is not None:
            self.refresh_chart()
        elif self.chart_of is None:
            self.show("#chart-title", "no trial to chart" if not self.table.total_count
                      else "no trial highlighted")
        if sorted(self.ckpt_marks.items()) != self.ckpt_shown:
            self.refresh_checkpoints()
        self.refresh_header()

    @on(RowTable.CursorMoved, "#trials")
    def _moved(self, _: RowTable.CursorMoved) -> None:
        self.refresh_chart()

    def _width(self) -> int:
        return max(CHART_MIN_POINTS, self.query_one("#chart", PlotextPlot).size.width)

    @work(exclusive=True, group="chart")
    async def refresh_chart(self) -> None:
        """Read the selected trial's new reports past the cursor and append them; a new
        trial, group or run (a restart may roll reports back) starts over with a
        downsampled read of at most the chart's width per metric."""
        if not self.live:
            return  # a refresh queued just before the screen closed
        key = self.table.cursor_key
        if key is None:
            return
        width = self._width()
        want = (key, self.group, self.restarts.get(key, 0))
        try:
            if want != self.chart_of:
                got = await self.client.metric_series(int(key), self.group, width)
                points = {s["name"]: list(zip(s["steps"], s["values"], strict=True))
                          for s in got["series"]}
                cursor = got["lastSteps"] if got["lastSteps"] is not None else -1
                self.chart_reads["series"] += 1
            else:
                new = await self.client.metrics(int(key), self.group, after_steps=self.cursor)
                points, cursor = self._appended(new, width)
                self.chart_reads["appended"] += len(new)
        except Exception as exc:  # noqa: BLE001 - shown in the chart, never raised
            if want != self.chart_of and self.live:
                self._unread(key, exc)  # not another trial's chart under this one's name
            return  # new reports of the trial shown: the chart stays as it was
        if not self.live:
            return  # the screen was closed meanwhile
        self.chart_of, self.points, self.cursor = want, points, cursor
        self._draw(key)

    def _unread(self, key: str, exc: Exception) -> None:
        """The selected trial's metrics could not be read: an empty chart that says why (the
        next refresh reads them again)."""
        self.chart_of, self.points, self.cursor = None, {}, -1
        self._draw(key, f"trial {key}: metrics not read ({getattr(exc, 'message', exc)})")

    def _appended(self, reports: list[dict[str, Any]],
                  width: int) -> tuple[dict[str, list[tuple[float, float]]], int]:
        points = {name: list(p) for name, p in self.points.items()}
        cursor = self.cursor
        for r in reports:
            cursor = max(cursor, int(r["stepsCompleted"]))
            for name, v in ((r.get("metrics") or {}).get("avgMetrics") or {}).items():
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    points.setdefault(name, []).append((r["stepsCompleted"], v))
        return {n: series.downsample(p, width) if len(p) > 2 * width else p
                for n, p in points.items()}, cursor

    def on_resize(self, event: events.Resize) -> None:
        """The y ticks are laid out for the chart's rows: drawn again at its new height; the
        checkpoints show whole UUIDs only where they fit."""
        if self.chart_of is not None:
            self.call_after_refresh(self._draw, self.chart_of[0])
        self.call_after_refresh(self._fit_checkpoints)

    def _fit_checkpoints(self) -> None:
        if self.is_mounted:
            ckpts = self.query_one("#checkpoints", RowTable)
            ckpts.set_columns(ckpt_columns(ckpts.size.width))

    def _draw(self, key: str, failure: str = "") -> None:
        names = sorted(self.points)
        self.names = names
        metric = self.metric if self.metric in names else (names[0] if names else "")
        self.charted = metric
        self._title()  # the header names the metric the chart shows
        xs = [p[0] for p in self.points.get(metric, [])]
        ys = [p[1] for p in self.points.get(metric, [])]
        chart = self.query_one("#chart", PlotextPlot)
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        self.show("#chart-title", failure or (f"trial {key}: {metric} ({self.group})" if metric
                                              else f"trial {key}: no {self.group} metrics yet"))
        plt.xlabel("batches")
        if xs:
            plt.plot(xs, ys, marker="braille")
            x = whole_ticks(min(xs), max(xs), chart.size.width)
            plt.xticks(x, [str(t) for t in x])  # batches are whole: no 118.8
            y = axis(min(ys), max(ys), rows=chart.size.height - CHART_FRAME)
            plt.ylim(y.low, y.high)  # round ticks, the same number of rows apart
            plt.yticks(y.ticks, y.labels)
        chart.refresh()

    @work(exclusive=True, group="checkpoints")
    async def refresh_checkpoints(self) -> None:
        """The newest CKPT_ROWS checkpoints, read again only when a trial's count or bytes of
        checkpoints changed (not on every metric)."""
        marks = sorted(self.ckpt_marks.items())
        try:
            ckpts, total = await self.client.newest_checkpoints(self.exp_id, CKPT_ROWS)
        except Exception:  # noqa: BLE001
            return
        if not self.live:
            return
        self.ckpt_shown = marks
        storage = (self.experiment.get("config") or {}).get("checkpoint_storage") or {}
        shown = f" ({len(ckpts)} newest of {total})" if total > len(ckpts) else ""
        self.show("#gc", f"Checkpoints{shown}; GC keeps "
                  f"{storage.get('save_experiment_best', 0)} best, "
                  f"and per trial {storage.get('save_trial_best', 1)} best, "
                  f"{storage.get('save_trial_latest', 1)} latest")
        rows = [(c["uuid"], {
            "trial": (c.get("training") or {}).get("trialId"), "uuid": c["uuid"],
            "uuid8": str(c["uuid"])[:UUID_SHORT],
            "steps": (c.get("metadata") or {}).get("steps_completed"),
            "state": state_text(c.get("state")),
            "metric": _fmt((c.get("training") or {}).get("searcherMetric"))}) for c in ckpts]
        self.query_one("#checkpoints", RowTable).set_rows(rows)

    # -- the trials table: legend, filter, sort, selection, copy --------------------------

    def _legend(self) -> None:
        """Under the table: how many trials show, the columns left out for width, and what
        the marks mean (those on screen); said shorter where the long words do not fit."""
        t = self.table
        if not self.fed:
            self.show("#legend", "loading trials…")
            return
        parts = [(counted(t, "trial") + (f", filter {t.filter_text!r}" if t.filter_text
                                          else ""),) * 2]
        if self.columns.more_hparams:
            n = self.columns.more_hparams
            parts.append((f"{n} more hyperparameters not shown (at most {MAX_HPARAMS} "
                          "columns)", f"+{n} hparams not shown"))
        if any(t.get("stoppedBySearcher") for t in self.trials.values()):
            parts.append((f"{STOPPED} stopped early by the searcher", f"{STOPPED} stopped early"))
        if self.selected:
            parts.append((f"{SELECTED} {len(self.selected)} selected, C compares",) * 2)
        room = (self.query_one("#legend").size.width or self.app.size.width) - 2
        longs = " · ".join(p[0] for p in parts)
        rest = [p[0] for p in parts] if cell_len(longs) < room // 2 else [p[1] for p in parts]
        hidden = [c.label for c in t.columns if c.key in set(t.hidden_columns)]
        if hidden:
            free = room - cell_len(" · ".join(rest)) - 3
            rest.insert(1, hidden_note(hidden, free))
        self.show("#legend", " · ".join(rest))

    def view_changed(self) -> None:
        t = self.table
        VIEWS.setdefault(self.app, {})[self.exp_id] = (t.sort_column, t.sort_reverse,
                                                       t.filter_text)
        self._legend()
        unknown = self.table.filter_unknown
        if unknown:
            self.notify(f"no such column: {', '.join(unknown)} searched for as text",
                        severity="warning", timeout=4)

    def _restore_view(self) -> None:
        """The sort and filter this experiment had when it was last left (once its trials,
        and so their columns, came)."""
        self.restored = True
        column, reverse, text = VIEWS.get(self.app, {}).get(self.exp_id, (None, False, ""))
        t = self.table
        if column is not None and column in {c.key for c in t.columns}:
            t.sort_by(column, reverse)
        if text:
            box = self.query_one("#filter", Input)
            box.value = text
            box.add_class("shown")
            t.set_filter(text)

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """As Textual's, with Tab after this screen's other keys: Textual's own Tab (focus
        next) is bound first, so ours would take its place at the head of the footer."""
        found = dict(super().active_bindings)
        if "tab" in found:
            found["tab"] = found.pop("tab")
        return found

    def action_toggle_focus(self) -> None:
        """Tab: the focus moves between the trials and the checkpoints tables."""
        ckpts = self.query_one("#checkpoints", RowTable)
        (self.table if ckpts.has_focus else ckpts).focus()

    @on(RowTable.Arranged, "#trials")
    def _arranged(self, _: RowTable.Arranged) -> None:
        self._legend()

    def filter_box(self) -> Input:
        return PlainInput(placeholder=FILTER_HINT, id="filter")

    @on(RowTable.FilterRefused, "#trials")
    def _refused(self, event: RowTable.FilterRefused) -> None:
        """The filter box stays open, marked, with the text to correct (the table's
        notification says why)."""
        box = self.query_one("#filter", Input)
        box.add_class("shown", "-refused")
        box.tooltip = event.error
        self.set_focus(box)

    @on(Input.Changed, "#filter")
    def _typed(self, _: Input.Changed) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("-refused")
        box.tooltip = None

    def action_back(self) -> None:
        """Escape: clears the filter first (as on the lists), then goes back."""
        box = self.query_one("#filter", Input)
        if box.has_focus or box.has_class("shown") or self.table.filter_text:
            self.action_clear_filter()
        else:
            self.app.pop_screen()

    @work(group="dialog")
    async def action_sort_by(self) -> None:
        """Sort by a column named (as the filter names them: `lr`, `optimizer.lr`, `best`);
        `-name` sorts descending."""
        t = self.table
        current = t.sort_column or ""
        label = t.columns[[c.key for c in t.columns].index(current)].label if current else ""
        answer = await self.ask("Sort by which column? A title or the end of one (lr, best, "
                                "steps); -lr sorts descending; empty: as the master lists them",
                                ("-" if t.sort_reverse else "") + label)
        if answer is None:
            return
        name = answer.strip()
        reverse = name.startswith("-")
        name = name.removeprefix("-").strip()
        try:
            index = t.column_named(name) if name else None
        except FilterError as exc:
            self.notify(str(exc), title="cannot sort", severity="error")
            return
        if name and index is None:
            known = ", ".join(c.label for c in t.columns if c.key != "sel")
            self.notify(f"no column '{name}' (columns: {known})", title="cannot sort",
                        severity="error")
            return
        t.sort_by(t.columns[index].key if index is not None else None, reverse)
        self.view_changed()

    @property
    def smaller_is_better(self) -> bool:
        searcher = (self.experiment.get("config") or {}).get("searcher") or {}
        return searcher.get("smaller_is_better", True) is not False

    def _select(self, keys: list[str]) -> None:
        """Make `keys` the selection (in this order: trial i gets colour i) and repaint the
        rows whose marker changed."""
        before = {k: i for i, k in enumerate(self.selected)}
        self.selected = list(dict.fromkeys(keys))[:MAX_SELECTED]
        after = {k: i for i, k in enumerate(self.selected)}
        changed = [k for k in {**before, **after} if before.get(k) != after.get(k)]
        self.table.apply(upsert=[(k, self._row(self.trials[k])) for k in changed
                                 if k in self.trials])
        self._legend()

    def action_toggle_selected(self) -> None:
        key = self.table.cursor_key
        if key is None:
            self.notify("no trial highlighted", severity="warning")
            return
        if key in self.selected:
            self._select([k for k in self.selected if k != key])
        elif len(self.selected) >= MAX_SELECTED:
            self.notify(f"at most {MAX_SELECTED} trials are compared at once",
                        severity="warning")
        else:
            self._select([*self.selected, key])

    def _ranked(self) -> list[str]:
        return ranked(self.trials.values(), self.columns.metric, self.smaller_is_better)

    @work(group="dialog")
    async def action_top(self) -> None:
        """Select the best N trials by the searcher's metric (their best validation)."""
        metric, better = self.columns.metric, "smaller" if self.smaller_is_better else "larger"
        answer = await self.ask(f"Select the top N trials by {metric} ({better} is better); "
                                "N:", str(TOP_DEFAULT))
        if answer is None:
            return
        try:
            n = int(answer.strip())
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_SELECTED:
            self.notify(f"N: a whole number from 1 to {MAX_SELECTED}, not {answer!r}",
                        severity="error")
            return
        top = self._ranked()[:n]
        if not top:
            self.notify(f"no trial has a validation {metric} yet", severity="warning")
            return
        self._select(top)
        self.notify(f"top {len(top)} by {metric}: trials {', '.join(top)}", timeout=4)

    def action_compare(self) -> None:
        """The selected trials' curves on one chart; with none selected, the top 10 by the
        searcher's metric (selected then, so the rows' markers match the curves)."""
        if not self.selected:
            top = self._ranked()[:COMPARE_DEFAULT]
            if not top:
                self.notify(f"select trials (space, T) to compare: no trial has a validation "
                            f"{self.columns.metric} yet", severity="warning")
                return
            self._select(top)
        from dettui.screens.compare import CompareScreen

        self.app.push_screen(CompareScreen(
            self.exp_id, [int(k) for k in self.selected], metric=self.charted or self.metric,
            group=self.group, smaller_is_better=self.smaller_is_better))

    def action_yank(self) -> None:
        """Copy the highlighted trial's id, or the checkpoint's UUID when the checkpoints
        have the focus, to the clipboard (OSC 52: works over SSH and in tmux)."""
        ckpts = self.query_one("#checkpoints", RowTable)
        if ckpts.has_focus:
            text, what = ckpts.cursor_key, "checkpoint UUID"
        else:
            text, what = self.table.cursor_key, "trial id"
        if text is None:
            self.notify(f"no {what.split()[0]} highlighted", severity="warning")
            return
        self.app.copy_to_clipboard(text)
        self.notify(f"{what} {text}", title="copied to the clipboard", timeout=4)

    def action_next_metric(self) -> None:
        if not self.names:
            self.notify("no metrics reported yet", severity="warning")
            return
        i = self.names.index(self.metric) if self.metric in self.names else -1
        self.metric = self.names[(i + 1) % len(self.names)]
        self._title()
        if self.table.cursor_key is not None:
            self._draw(self.table.cursor_key)  # every metric's points are here already

    def action_toggle_group(self) -> None:
        self.group = "training" if self.group == "validation" else "validation"
        self._title()
        self.refresh_chart()

    def action_logs(self) -> None:
        key = self.table.cursor_key
        if key is None:
            self.notify("no trial selected", severity="warning")
            return
        from dettui.screens.logs import LogsScreen

        self.app.push_screen(LogsScreen(int(key)))

    @on(RowTable.Selected, "#trials")
    def _open_logs(self, _: RowTable.Selected) -> None:
        self.action_logs()

    @work(group="dialog")
    async def action_control(self, verb: str) -> None:
        e = self.experiment
        await self.control(self.exp_id, verb, str(e.get("name") or ""),
                           state_text(e.get("state")))
        self.refresh_header()


    @work(group="dialog")
    async def action_download(self) -> None:
        """The checkpoint the user sees selected: the checkpoints table's row when that table
        has the focus, else the highlighted trial's best (by the searcher's metric; its
        latest when none has one). Into a folder the user confirms, by default
        ./checkpoints/exp-<id>-trial-<id>-step-<n>-<uuid8> (shown in full)."""
        ckpts = self.query_one("#checkpoints", RowTable)
        try:
            if ckpts.has_focus:
                if ckpts.cursor_key is None:
                    self.notify("no checkpoint selected", severity="warning")
                    return
                ckpt, what = await self.client.checkpoint(ckpts.cursor_key), "checkpoint"
            else:
                key = self.table.cursor_key
                if key is None:
                    self.notify("no trial selected", severity="warning")
                    return
                ckpt, what = await self._trial_checkpoint(int(key))
        except DettuiError as exc:
            self.notify(exc.message, title="cannot download", severity="error")
            return
        if ckpt is None:
            self.notify(what, severity="warning")
            return
        from dettui.commands.checkpoint import folder_name

        name = folder_name(self.exp_id, ckpt)
        answer = await self.ask_path(f"Download {what} {ckpt['uuid']} into the folder "
                                     "(Enter downloads, Escape cancels):",
                                     str(Path.cwd() / "checkpoints" / name), files=False)
        if not answer:
            self.notify("download canceled", timeout=2)
            return
        dest = Path(answer).expanduser()
        if dest.is_dir() and any(dest.iterdir()):
            dest = dest / name  # a folder picked in the tree: the checkpoint goes inside it
        self.download(str(ckpt["uuid"]), dest)

    async def _trial_checkpoint(self, trial_id: int) -> tuple[dict[str, Any] | None, str]:
        """The trial's best completed checkpoint and a few words saying which ("trial 3's
        best checkpoint"), else its latest; None and why when it has none."""
        done = ("STATE_COMPLETED",)
        best = await self.client.trial_checkpoints(
            trial_id, limit=1, sort_by="SORT_BY_SEARCHER_METRIC", states=done)
        if best and (best[0].get("training") or {}).get("searcherMetric") is not None:
            return best[0], f"trial {trial_id}'s best checkpoint"
        latest = await self.client.trial_checkpoints(trial_id, limit=1, newest_first=True,
                                                     states=done)
        if latest:
            return latest[0], f"trial {trial_id}'s latest checkpoint"
        return None, f"trial {trial_id} has no completed checkpoint to download"

    @work(exclusive=True, group="download")
    async def download(self, uuid: str, dest: Path) -> None:
        from dettui.commands.checkpoint import fetch

        done = [0]
        ticker = self.set_interval(0.2, lambda: self.show(
            "#gc", f"Downloading {uuid[:8]}: {byte_size.human(done[0])}"))
        try:
            path = await fetch(self.client, uuid, dest,
                               progress=lambda n, _total: done.__setitem__(0, n))
        except Exception as exc:  # noqa: BLE001 - shown, not raised
            self.notify(str(exc), title=f"checkpoint {uuid[:8]}", severity="error")
            return
        finally:
            ticker.stop()
            self.refresh_checkpoints()
        self.notify(f"{byte_size.human(done[0])} in {path}", title=f"checkpoint {uuid[:8]}")


def hidden_note(labels: list[str], room: int) -> str:
    """What the legend says of the columns left out for width, in at most `room` cells
    where it can: their titles, as many whole ones as fit and how many more, else only how
    many (never a title cut in the middle)."""
    n = len(labels)
    head = f"{n} column{'s' if n > 1 else ''} hidden (wider shows them; S sorts by any): "
    full = head + ", ".join(labels)
    if cell_len(full) <= room:
        return full
    for k in range(n - 1, 0, -1):
        text = head + ", ".join(labels[:k]) + f" +{n - k} more"
        if cell_len(text) <= room:
            return text
    short = f"+{n} column{'s' if n > 1 else ''} (S sorts by any; wider shows all)"
    return short if cell_len(short) <= room else f"+{n} columns (S sorts by any)"


def whole_ticks(low: float, high: float, width: int) -> list[int]:
    """Ticks between `low` and `high` at whole numbers (batches) a round step apart (1, 2 or
    5 times a power of ten), about 10 cells apart on a chart `width` cells wide."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    low, high = min(low, high), max(low, high)
    rough = max((high - low) / max(width // 10, 1), 1.0)
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    first = math.ceil(low / step) * step
    ticks = [int(first + i * step) for i in range(int((high - first) // step) + 1)]
    return ticks or [round(low)]


def _warned(e: dict[str, Any]) -> tuple[str, ...]:
    """The header's note of the experiment's warnings (search sanity), as plain text."""
    warnings = [str(w) for w in e.get("warnings") or ()]
    if not warnings:
        return ()
    more = f" (+{len(warnings) - 1} more: dettui e describe)" if len(warnings) > 1 else ""
    return (f"\n! warning: {warnings[0]}{more}",)
