"""The queue table with 10,000 jobs: first paint, updates, memory. dettui's RowTable (the queue
screen's table, fed the way the push stream feeds it) against Textual's own DataTable holding
the same rows, headless at 160x50, each in a fresh process of the same run.

    .venv/bin/python bench/tui.py [--jobs 10000] [--changes 100] [--rounds 10]

What is measured (wall clock, `time.perf_counter`):
- first paint: from handing the rows over (`set_rows` / `add_rows`) to the end of the first
  screen update that draws table rows. Headless, so nothing is written to a terminal, but the
  frame is real: the compositor renders every visible line, and a hook on `App._display`
  turns the update into the escape sequences a terminal would get (`render_segments`).
- settled: the same start to `pilot.pause()` returning. That waits for the app to go idle and
  always sleeps at least 20 ms (Textual's `wait_for_idle` granularity), so it has a floor.
- update, "to screen": one diff of `--changes` jobs handed over -> the end of the first frame
  that shows it (this includes waiting for Textual's frame timer); "work": the widget call
  plus that frame's compositing. 10 of the jobs are rows on screen, the rest anywhere.
  * changed: jobs start/finish (state and slots change; the queue order does not). RowTable:
    `apply(upsert=...)`; DataTable: `update_cell` for each cell that changed.
  * re-prioritised: the jobs also get a more urgent priority, so they move to the top, and
    the stream's diff carries the full new order: RowTable `apply(upsert=..., order=[all
    10,000 keys])`; DataTable `update_cell` for the changed cells, then `sort` by Priority, #.
- memory: the process's RSS after loading (psutil), and its growth over the empty app.

The compare chart (`--case chart`): 100 trials x 10,000 points each (a seeded random walk
per trial), headless at 200x50, each drawer in a fresh process:
- dettui: each series downsampled as the master does for the compare screen's read
  (`dettui.series.downsample` to twice the terminal's width, 400 points; timed on its own:
  the master's work, once per read), then the compare screen's chart widget
  (`widgets.overlay.Figure` with `plot.overlay`) from handing it the 100 curves to the end of
  the first frame that shows them (the same frame hook as the table's); `--rounds` rounds,
  each laid out again from the curves: median and best, and the median CPU time of the
  process (`time.process_time`: what the chart costs on a machine busy with other work).
- naive: textual-plotext's PlotextPlot (the experiment screen's chart) given every raw point
  of the 100 trials (plotext's braille lines), to the end of its first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

COLUMNS = ["#", "ID", "Type", "Job Name", "Priority", "Submitted", "Slots", "State", "User"]
KEYS = ["pos", "id", "type", "name", "priority", "submitted", "slots", "state", "user"]
STATES = ("QUEUED", "SCHEDULED", "SCHEDULED_BACKFILLED")


def job(i: int, version: int = 0, priority: int = 42) -> dict[str, Any]:
    """A row shaped like `dettui job list`'s."""
    return {"pos": i, "id": f"{i:08x}-aaaa-bbbb", "type": "EXPERIMENT",
            "name": f"spirals-{i} ({i})", "priority": priority,
            "submitted": "2026-11-22 12:00:00", "slots": f"{version % 2}/1",
            "state": STATES[version % 3], "user": "determined"}


class Table:
    """The two widgets behind one interface: load, patch rows, reorder."""

    def __init__(self, kind: str, widget: Any) -> None:
        self.kind, self.widget = kind, widget
        self.current: dict[str, dict[str, Any]] = {}

    def load(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        self.current = {k: r for k, r in rows}
        if self.kind == "rowtable":
            self.widget.set_rows(rows)
        else:
            self.columns = self.widget.add_columns(*COLUMNS)
            row_keys = self.widget.add_rows([[row[k] for k in KEYS] for _, row in rows])
            self.row_keys = {key: rk for (key, _), rk in zip(rows, row_keys, strict=True)}

    def patch(self, rows: list[tuple[str, dict[str, Any]]], order: list[str] | None) -> None:
        if self.kind == "rowtable":
            self.widget.apply(upsert=rows, order=order)
            return
        for key, row in rows:
            old = self.current[key]
            for column, k in zip(self.columns, KEYS, strict=True):
                if row[k] != old[k]:
                    self.widget.update_cell(self.row_keys[key], column, row[k])
        if order is not None:
            self.widget.sort(self.columns[4], self.columns[0])
        self.current.update(rows)


async def run_one(kind: str, jobs: int, changes: int, rounds: int) -> dict[str, Any]:
    from textual.app import App, ComposeResult
    from textual.widgets import DataTable

    from dettui.widgets import Column, RowTable

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            if kind == "rowtable":
                yield RowTable([Column(k, c) for k, c in zip(KEYS, COLUMNS, strict=True)])
            else:
                yield DataTable()

    proc = psutil.Process()
    app = Bench()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        table = Table(kind, app.query_one(RowTable if kind == "rowtable" else DataTable))
        frames = watch_frames(app, table.widget)
        rss0 = proc.memory_info().rss
        rows = [(f"k{i}", job(i)) for i in range(jobs)]
        t0 = time.perf_counter()
        table.load(rows)
        await pilot.pause()
        settled = time.perf_counter() - t0
        first_paint = frames.first_after(t0)[1] - t0
        rss = proc.memory_info().rss
        changed = await time_updates(pilot, table, frames, jobs, changes, rounds, False)
        moved = await time_updates(pilot, table, frames, jobs, changes, rounds, True)
        return {"first_paint": first_paint, "settled": settled, "changed": changed,
                "moved": moved, "rss_mb": rss / 2**20, "growth_mb": (rss - rss0) / 2**20}


class Frames:
    """Screen updates: when each began and ended, and whether it drew table rows."""

    def __init__(self) -> None:
        self.rows_rendered = False
        self.start = 0.0
        self.done: list[tuple[float, float]] = []  # (start, end) of frames that drew rows

    def first_after(self, t0: float) -> tuple[float, float]:
        return next((a, b) for a, b in self.done if a >= t0)


def watch_frames(app: Any, widget: Any) -> Frames:
    """Time each screen update that rendered table rows (the header is line 0): from the
    compositor starting it to the escape sequences for the terminal being ready."""
    frames = Frames()
    render_line: Callable[[int], Any] = widget.render_line
    compositor = app.screen._compositor
    render_update, display = compositor.render_update, app._display

    def counting_render_line(y: int) -> Any:
        strip = render_line(y)
        frames.rows_rendered |= y > 0 and bool(strip.text.strip())
        return strip

    def timed_render_update(*args: Any, **kwargs: Any) -> Any:
        frames.start = time.perf_counter()
        return render_update(*args, **kwargs)

    def timed_display(screen: Any, update: Any) -> None:
        display(screen, update)
        if update is not None:
            update.render_segments(app.console)  # what a terminal would be sent
            if frames.rows_rendered:
                frames.done.append((frames.start, time.perf_counter()))
                frames.rows_rendered = False

    widget.render_line = counting_render_line
    compositor.render_update = timed_render_update
    app._display = timed_display
    return frames


async def time_updates(pilot: Any, table: Table, frames: Frames, jobs: int, changes: int,
                       rounds: int, reprioritise: bool) -> dict[str, float]:
    """Per diff: to screen = handed over -> end of the first frame showing it; work = the
    widget call plus that frame's compositing (without the wait for Textual's frame timer)."""
    to_screen, work = [], []
    for r in range(1, rounds + 1):
        on_screen = {(r + i) % 40 for i in range(changes // 10)}  # some rows in view change
        picked = sorted(on_screen | {(i * 97 + r * 13) % jobs for i in range(changes)})
        picked = picked[:changes]
        rows = [(f"k{i}", job(i, r, (r if reprioritise else 42))) for i in picked]
        order = None
        if reprioritise:  # the master's new queue order, computed before the clock starts
            after = {**table.current, **dict(rows)}
            order = sorted(after, key=lambda k: (after[k]["priority"], after[k]["pos"]))
        t0 = time.perf_counter()
        table.patch(rows, order)
        called = time.perf_counter() - t0
        await pilot.pause()
        start, end = frames.first_after(t0)
        to_screen.append(end - t0)
        work.append(called + end - start)
    return {"median": statistics.median(to_screen), "max": max(to_screen),
            "work": statistics.median(work)}


def walk(seed: int, points: int) -> list[float]:
    """A loss-like series: a decaying random walk, above zero."""
    import random

    rng, value, out = random.Random(seed), 1.0, []
    for _ in range(points):
        value = value * 0.9995 + rng.gauss(0, 0.01)
        out.append(abs(value) + 0.01)
    return out


CHART_SIZE = (200, 50)


async def chart_one(kind: str, trials: int, points: int, rounds: int) -> dict[str, Any]:
    """Time one drawer (see the module docstring): downsample (dettui only), then hand the
    curves over -> end of the first frame that shows them."""
    from textual.app import App, ComposeResult
    from textual_plotext import PlotextPlot

    from dettui import series
    from dettui.screens.compare import MAX_POINTS
    from dettui.widgets.overlay import Figure
    from dettui.widgets.plot import Curve, overlay
    from dettui.widgets.trial_colours import colour, plot_colour

    raw = [walk(i, points) for i in range(trials)]
    steps = list(range(1, points + 1))

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            yield Figure() if kind == "dettui" else PlotextPlot()

    app = Bench()
    out: dict[str, Any] = {"trials": trials, "points": points}
    async with app.run_test(size=CHART_SIZE) as pilot:
        await pilot.pause()
        widget = app.query_one(Figure if kind == "dettui" else PlotextPlot)
        shown: list[float] = []
        display = app._display

        def timed_display(screen: Any, update: Any) -> None:
            display(screen, update)
            if update is not None:
                update.render_segments(app.console)
                shown.append(time.perf_counter())

        app._display = timed_display  # type: ignore[method-assign]
        if kind == "dettui":
            n = min(MAX_POINTS, 2 * CHART_SIZE[0])  # what the compare screen asks for
            t0 = time.perf_counter()
            down = [series.downsample(list(zip(steps, ys, strict=True)), n) for ys in raw]
            out["downsample"] = time.perf_counter() - t0
            out["drawn_points"] = sum(len(d) for d in down)
            curves = [Curve(colour(i), [p[0] for p in d], [p[1] for p in d])
                      for i, d in enumerate(down)]
            walls, cpus = [], []
            for _ in range(rounds):  # each round lays the chart out again from the curves
                t0, cpu0 = time.perf_counter(), time.process_time()
                widget.show(lambda w, h: overlay(curves, w, h))
                await pilot.pause()
                cpus.append(time.process_time() - cpu0)
                walls.append(next(t for t in shown if t >= t0) - t0)
            out.update(to_screen=statistics.median(walls), best=min(walls),
                       cpu=statistics.median(cpus), rounds=rounds)
            return out
        else:
            out["drawn_points"] = trials * points
            t0, cpu0 = time.perf_counter(), time.process_time()
            plt = widget.plt
            for i, ys in enumerate(raw):
                plt.plot(steps, ys, marker="braille", color=plot_colour(i))
            widget.refresh()
        await pilot.pause()
        out["cpu"] = time.process_time() - cpu0  # the process's CPU seconds (a busy machine)
        out["to_screen"] = out["best"] = next(t for t in shown if t >= t0) - t0
        out["rounds"] = 1
    return out


def chart_measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--one", f"chart-{kind}", "--trials",
                          str(args.trials), "--points", str(args.points), "--rounds",
                          str(args.rounds)],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def chart_report(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    ours, naive = chart_measure("dettui", args), chart_measure("plotext", args)
    out = RichTable(title=f"compare chart: {args.trials} trials x {args.points:,} points, "
                          f"{CHART_SIZE[0]}x{CHART_SIZE[1]} headless; to screen = curves "
                          "handed over -> end of the first frame showing them")
    for col in ("chart", "points drawn", "downsample (master)", "to screen (median / best)",
                "CPU (median)"):
        out.add_column(col, justify="right")
    out.add_row(f"dettui compare (braille, downsampled), {ours['rounds']} rounds",
                f"{ours['drawn_points']:,}", f"{ours['downsample'] * 1000:.0f} ms",
                f"{ours['to_screen'] * 1000:.0f} ms / {ours['best'] * 1000:.0f} ms",
                f"{ours['cpu'] * 1000:.0f} ms")
    out.add_row("plotext, every raw point, 1 round", f"{naive['drawn_points']:,}", "-",
                f"{naive['to_screen'] * 1000:.0f} ms", f"{naive['cpu'] * 1000:.0f} ms")
    out.add_row("ratio (plotext / dettui)", "", "",
                f"{naive['to_screen'] / max(ours['to_screen'], 1e-9):.1f}x",
                f"{naive['cpu'] / max(ours['cpu'], 1e-9):.1f}x")
    Console(width=132).print(out)
    print(f"load average when done: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("target (100 trials x 10,000 points drawn in under 0.5 s): "
          f"{'met' if ours['to_screen'] < 0.5 else 'NOT met'}")


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--one", kind, "--jobs", str(args.jobs),
                          "--changes", str(args.changes), "--rounds", str(args.rounds)],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--one", choices=["rowtable", "datatable", "chart-dettui",
                                          "chart-plotext"])
    parser.add_argument("--case", choices=["table", "chart", "all"], default="all",
                        help="the queue table, the compare chart, or both (default)")
    parser.add_argument("--trials", type=int, default=100, help="compare chart: trials")
    parser.add_argument("--points", type=int, default=10_000, help="compare chart: per trial")
    args = parser.parse_args()
    if args.one and args.one.startswith("chart-"):
        print(json.dumps(asyncio.run(chart_one(args.one.removeprefix("chart-"), args.trials,
                                               args.points, args.rounds))))
        return
    if args.one:
        print(json.dumps(asyncio.run(run_one(args.one, args.jobs, args.changes, args.rounds))))
        return
    if args.case in ("table", "all"):
        table_report(args)
    if args.case in ("chart", "all"):
        chart_report(args)


def table_report(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    ours, theirs = measure("rowtable", args), measure("datatable", args)
    out = RichTable(title=f"{args.jobs:,} jobs, 160x50 headless; updates: {args.changes} jobs "
                          f"each, {args.rounds} rounds, to screen median / max (work)")
    for col in ("table", "first paint", "settled", "update: changed",
                "update: re-prioritised", "RSS (growth)"):
        out.add_column(col, justify="right")

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.1 else f"{seconds * 1000:.1f} ms"

    def update(u: dict[str, float]) -> str:
        return f"{ms(u['median'])} / {ms(u['max'])} ({ms(u['work'])})"

    for name, r in (("dettui RowTable", ours), ("Textual DataTable", theirs)):
        out.add_row(name, ms(r["first_paint"]), ms(r["settled"]), update(r["changed"]),
                    update(r["moved"]), f"{r['rss_mb']:.0f} MB ({r['growth_mb']:.0f} MB)")

    def ratio(key: str, sub: str | None = None) -> str:
        a, b = (theirs[key], ours[key]) if sub is None else (theirs[key][sub], ours[key][sub])
        return f"{a / max(b, 1e-9):.1f}x"

    out.add_row("ratio (DataTable / RowTable)", ratio("first_paint"), ratio("settled"),
                f"{ratio('changed', 'median')} ({ratio('changed', 'work')})",
                f"{ratio('moved', 'median')} ({ratio('moved', 'work')})", ratio("growth_mb"))
    Console(width=132).print(out)
    ok = (ours["first_paint"] <= 0.5 and ours["changed"]["median"] <= 0.05
          and ours["moved"]["median"] <= 0.05 and ours["rss_mb"] <= 300)
    print("targets (first paint <= 0.5 s, update of 100 jobs on screen <= 50 ms, process RSS "
          f"<= 300 MB): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
