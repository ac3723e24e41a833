"""The compare screen (issue 33 item 2) with fixed data at the API boundary: three trials'
curves overlaid in their colours (the colours of trial_colours, as the trials table marks their
rows), the legend, `m`/`g`/`x`/`L`, the hyperparameter scatter, parallel coordinates on a wide
terminal and the message on a narrow one, a trial whose metrics cannot be read, and new
reports appended (not read again) as the experiment's feed says a trial moved on. Snapshots
at 80x24 and 200x50."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.style import Style
from textual.binding import Binding
from textual.pilot import Pilot

from dettui.errors import DettuiError
from dettui.screens.compare import CompareScreen
from dettui.widgets.chart_data import at_times
from dettui.widgets.overlay import Figure
from dettui.widgets.trial_colours import colour
from tests.conftest import Served
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
IDS = [12, 11, 13]  # selection order: 12 is colour 0, 11 colour 1, 13 colour 2
HPARAMS = {11: {"lr": 0.01, "hidden": 64, "optimizer": {"name": "adam"}},
           12: {"lr": 0.1, "hidden": 32, "optimizer": {"name": "sgd"}},
           13: {"lr": 0.03, "hidden": 128, "optimizer": {"name": "adam"}}}
RATE = {11: 0.5, 12: 0.8, 13: 0.3}


def trial(i: int, batches: int = 500, state: str = "STATE_RUNNING") -> dict[str, Any]:
    return {"id": i, "state": state, "totalBatchesProcessed": batches, "restarts": 0,
            "startTime": "2026-11-22T12:00:00Z", "hparams": HPARAMS[i]}


def curve(i: int, group: str, name: str, upto: int = 500) -> list[tuple[int, float]]:
    steps = range(100, upto + 1, 100) if group == "validation" else range(50, upto + 1, 50)
    if name == "validation_accuracy":
        return [(s, round(0.5 + RATE[i] * s / 1200, 4)) for s in steps]
    return [(s, round(1.0 / (1 + RATE[i] * s / 100), 4)) for s in steps]


NAMES = {"validation": ["validation_accuracy", "validation_loss"], "training": ["loss"]}


class Compared(FixedClient):
    """Experiment 1 with trials 11, 12 and 13; validation and training metrics; report
    times 10 s per 100 batches from 12:00."""

    feed: asyncio.Queue[dict[str, Any]]

    def __init__(self, agents: list[dict[str, Any]] | None = None) -> None:
        super().__init__(agents)
        self.calls: list[tuple[Any, ...]] = []
        self.upto = 500
        self.feed = asyncio.Queue()

    async def changes(self, topics: list[str], **kw: Any) -> AsyncIterator[dict[str, Any]]:
        if topics != ["experiment:1"]:
            async for m in super().changes(topics, **kw):
                yield m
            return
        trials = [trial(i) for i in (11, 12, 13)]
        yield {"topic": "experiment:1", "kind": "snapshot", "upsert": trials, "remove": [],
               "order": ["11", "12", "13"], "total": 3}
        while True:
            yield await self.feed.get()

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        self.calls.append(("series", trial_id, group, max_points))
        found = [{"name": n, "steps": [p[0] for p in curve(trial_id, group, n, self.upto)],
                  "values": [p[1] for p in curve(trial_id, group, n, self.upto)]}
                 for n in NAMES[group]]
        return {"series": found, "lastSteps": self.upto}

    async def metrics(self, trial_id: int, group: str | None = None,
                      after_steps: int | None = None) -> list[dict[str, Any]]:
        self.calls.append(("metrics", trial_id, group, after_steps))
        group = group or "validation"
        rows: dict[int, dict[str, float]] = {}
        for n in NAMES[group]:
            for s, v in curve(trial_id, group, n, self.upto):
                if after_steps is None or s > after_steps:
                    rows.setdefault(s, {})[n] = v
        return [{"stepsCompleted": s, "reportTime": f"2026-11-22T12:{s // 600:02d}:"
                 f"{s % 600 // 10:02d}Z", "metrics": {"avgMetrics": m}}
                for s, m in sorted(rows.items())]

    async def metric_times(self, trial_id: int, group: str,
                           anchors: int = 16) -> list[tuple[int, str]]:
        self.calls.append(("times", trial_id, group))
        return [(r["stepsCompleted"], r["reportTime"]) for r in
                await self.metrics(trial_id, group)]


class OneFails(Compared):
    """Trial 13's metrics cannot be read."""

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        if trial_id == 13:
            raise DettuiError("the master is restarting")
        return await super().metric_series(trial_id, group, max_points)


class Negative(Compared):
    """Trial 11 reports a validation loss below zero (a log scale cannot show it)."""

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        got = await super().metric_series(trial_id, group, max_points)
        if trial_id == 11:
            for s in got["series"]:
                s["values"][-1] = -0.5
        return got


def compare(pilot: Pilot[None]) -> CompareScreen:
    screen = CompareScreen(1, IDS, metric="validation_loss", group="validation",
                           smaller_is_better=True)
    pilot.app.push_screen(screen)
    return screen


def text(screen: CompareScreen, selector: str) -> str:
    return str(screen.query_one(selector).render())


def chart(screen: CompareScreen) -> str:
    return "\n".join(r.plain for r in screen.query_one(Figure).drawn().rows)


async def drawn(screen: CompareScreen, what: str = "the 3 curves") -> None:
    await until_async(lambda: len(screen.series) + len(screen.failed) == 3
                      and len(screen.trials) == 3, what, timeout=15)
    await asyncio.sleep(0.2)


def colours_in_chart(screen: CompareScreen) -> set[str]:
    found = set()
    for row in screen.query_one(Figure).drawn().rows:
        for span in row.spans:
            style = span.style
            drawn = row.plain[span.start:span.end]
            if isinstance(style, Style) and style.color is not None and any(
                    "\u2800" <= ch <= "\u28ff" or ch == "●" for ch in drawn):
                found.add(style.color.name)
    return found


async def test_three_curves_in_their_rows_colours_with_a_legend() -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        assert colours_in_chart(screen) == {colour(0), colour(1), colour(2)}
        assert text(screen, "#title").startswith(
            "validation_loss (validation, best = min); x batches, y linear; 3 trials of "
            "experiment 1")
        legend = screen.table
        assert legend.keys_in_view_order == ["12", "11", "13"]  # the selection's order
        row = legend.row("12")
        assert row is not None and row["trial"] == ("● 12", Style(color=colour(0), bold=True))
        assert row["last"] == "0.2" and row["best"] == "0.2"  # 1 / (1 + 0.8 * 5)
        assert "lr=0.1" in row["hparams"] and "optimizer.name=sgd" in row["hparams"]
        assert "batches" in chart(screen)
        calls = app.client.calls  # type: ignore[attr-defined]
        assert sorted(c[1] for c in calls if c[0] == "series") == [11, 12, 13]
    assert app.errors == []


async def test_m_g_x_and_l_change_the_chart() -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        await pilot.press("m")
        await until_async(lambda: "validation_accuracy (validation, best = max)"
                          in text(screen, "#title"), "the next metric")
        assert screen.table.row("12")["best"] == "0.8333"  # type: ignore[index]
        await pilot.press("g")
        await until_async(lambda: "loss (training, best = min)" in text(screen, "#title")
                          and "12" in screen.series, "the training group, read", timeout=15)
        await pilot.press("x")
        await until_async(lambda: "seconds since each trial started" in chart(screen),
                          "the time axis", timeout=15)
        assert "x time" in text(screen, "#title")
        await pilot.press("L")
        await until_async(lambda: "y log" in text(screen, "#title"), "the log scale")
        assert colours_in_chart(screen) == {colour(0), colour(1), colour(2)}
    assert app.errors == []


async def test_log_scale_says_what_it_leaves_out_and_does_not_crash() -> None:
    app = FixedDashboard(client=Negative)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        await pilot.press("L")
        await until_async(lambda: "log scale: 1 point at or below 0 left out"
                          in text(screen, "#status"), "the note on the log scale")
        assert colours_in_chart(screen) == {colour(0), colour(1), colour(2)}
    assert app.errors == []


async def test_a_trial_whose_metrics_fail_says_so_and_the_others_are_drawn() -> None:
    app = FixedDashboard(client=OneFails)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        row = screen.table.row("13")
        assert row is not None
        assert row["hparams"][0] == "trial 13: metrics not read (the master is restarting)"
        assert "trial 13: metrics not read" in text(screen, "#status")
        assert colours_in_chart(screen) == {colour(0), colour(1)}
    assert app.errors == []


async def test_scatter_cycles_hyperparameters_numeric_and_categorical() -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        await pilot.press("h")
        await until_async(lambda: "hidden (h: next of 3)" in chart(screen), "the scatter")
        assert chart(screen).count("●") == 3
        assert colours_in_chart(screen) == {colour(0), colour(1), colour(2)}
        await pilot.press("h", "h")
        await until_async(lambda: "optimizer.name (h: next" in chart(screen), "categorical x")
        lines = chart(screen).splitlines()
        assert "adam" in lines[-2] and "sgd" in lines[-2]
        assert chart(screen).count("●") == 3
        await pilot.press("o")
        await until_async(lambda: "batches" in chart(screen), "back to the curves")
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_parallel_coordinates_on_a_wide_terminal_only(size: str) -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        await pilot.press("P")
        await pilot.pause(0.3)
        if size == "80x24":
            assert "parallel coordinates need a terminal at least 120 columns wide (this " \
                   "one has 80)" in chart(screen)
        else:
            shown = chart(screen)
            assert "best validation_loss" in shown and "hidden" in shown and "lr" in shown
            assert colours_in_chart(screen) == {colour(0), colour(1), colour(2)}
    assert app.errors == []


async def test_new_reports_are_appended_not_read_again() -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        client: Compared = app.client  # type: ignore[assignment]
        client.upto = 700
        await client.feed.put({"topic": "experiment:1", "kind": "diff",
                               "upsert": [trial(12, 700)], "remove": []})
        await until_async(lambda: screen.cursor.get("12") == 700, "trial 12's new reports",
                          timeout=15)
        await until_async(lambda: screen.table.row("12"), "the legend's last value",  # type: ignore
                          timeout=15, done=lambda r: r["last"] == "0.1515")
        series_reads = [c for c in client.calls if c[0] == "series"]
        assert len(series_reads) == 3  # not read again
        assert ("metrics", 12, "validation", 500) in client.calls
        assert screen.reads["appended"] == 2  # 600 and 700
    assert app.errors == []


async def test_enter_on_a_legend_row_opens_that_trials_logs() -> None:
    from dettui.screens.logs import LogsScreen

    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        await pilot.press("down", "enter")
        await until_async(lambda: isinstance(app.screen, LogsScreen), "the logs screen")
        assert app.screen.trial_id == 11  # type: ignore[attr-defined]  # the second row
    assert app.errors == []


async def test_no_trials_says_how_to_select_some() -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(80, 24)):
        screen = CompareScreen(1, [], metric="validation_loss", group="validation",
                               smaller_is_better=True)
        await app.push_screen(screen)
        await until_async(lambda: "no trials to compare" in chart(screen), "the reason")
    assert app.errors == []


async def test_help_lists_every_key_of_the_compare_screen() -> None:
    app = FixedDashboard(client=Compared)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = compare(pilot)
        await drawn(screen)
        await pilot.press("question_mark")
        await until_async(lambda: type(app.screen).__name__ == "HelpScreen", "help")
        shown = " ".join(str(w.render()) for w in app.screen.query("Static"))
        for b in CompareScreen.BINDINGS:
            assert isinstance(b, Binding) and b.description in shown, b
    assert app.errors == []


def test_time_between_sampled_reports_is_interpolated() -> None:
    anchors = [(100.0, 1000.0), (300.0, 1100.0)]
    assert at_times([(100, 0.0), (200, 0.0), (300, 0.0), (400, 0.0)], anchors, 990.0) == \
        [10.0, 60.0, 110.0, 110.0]


async def _open(pilot: Pilot[None], *pressed: str) -> None:
    await pilot.pause(0.2)
    screen = compare(pilot)
    await drawn(screen)
    for key in pressed:
        await pilot.press(key)
        await pilot.pause(0.4)
    await pilot.pause(0.3)


SNAPSHOTS = {"overlay": (Compared, ()), "log": (Compared, ("L",)),
             "scatter": (Compared, ("h",)), "parallel": (Compared, ("P",)),
             "failed": (OneFails, ())}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("view", SNAPSHOTS)
def test_compare_snapshot(snap_compare: Any, view: str, size: str) -> None:
    client, pressed = SNAPSHOTS[view]

    async def run(pilot: Pilot[None]) -> None:
        await _open(pilot, *pressed)

    assert snap_compare(FixedDashboard(client=client), terminal_size=SIZES[size],
                        run_before=run)


@pytest.mark.slow
async def test_against_a_real_master_reads_appends_and_times(
        headless: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three unmanaged trials on a real master: each trial's series read once, a new report
    appended from the experiment's feed (not read again), and the time axis from the reports'
    own times (a report every 10 s: the last at 40 s)."""
    from dettui.commands.dashboard import Dashboard

    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(headless.config_dir))
    exp = headless.api("POST", "/api/v1/experiments", {
        "config": f"checkpoint_storage: {{type: directory, container_path: {tmp_path}}}\n"
                  "name: compared\n", "unmanaged": True})["experiment"]
    ids = []
    for lr in (0.1, 0.01, 0.03):
        t = headless.api("POST", "/api/v1/trials", {"experimentId": exp["id"],
                                                     "hparams": {"lr": lr},
                                                     "unmanaged": True})["trial"]
        headless.api("POST", f"/api/v1/trials/{t['id']}/start", {"trialId": t["id"],
                                                                 "resume": True})
        ids.append(int(t["id"]))

    def report(tid: int, *steps: int) -> None:
        headless.api("POST", f"/api/v1/trials/{tid}/metrics/batch", {"reports": [
            {"group": "validation", "metrics": {
                "trialId": tid, "trialRunId": 1, "stepsCompleted": n,
                "reportTime": f"2026-11-22T12:00:{(n // 100 - 1) * 10:02d}Z",
                "metrics": {"avgMetrics": {"loss": (1 + ids.index(tid)) / n}}}}
            for n in steps]})

    for tid in ids:
        report(tid, 100, 200, 300, 400)
    app = Dashboard(headless.url, tmp_path / "unused")
    async with app.run_test(size=(120, 36)) as pilot:
        await until_async(lambda: getattr(app, "client", None) is not None, "the client")
        screen = CompareScreen(int(exp["id"]), ids, metric="loss", group="validation",
                               smaller_is_better=True)
        await app.push_screen(screen)
        await until_async(lambda: len(screen.series) == 3 and len(screen.trials) == 3,
                          "three trials read", timeout=30)
        assert screen.reads["series"] == 3 and screen.failed == {}
        await until_async(lambda: colours_in_chart(screen), "the three curves",
                          done=lambda c: c == {colour(0), colour(1), colour(2)})
        report(ids[0], 500)
        await until_async(lambda: screen.cursor.get(str(ids[0])) == 500, "the new report",
                          timeout=30)
        assert screen.reads["series"] == 3 and screen.reads["appended"] == 1
        await pilot.press("x")
        await until_async(lambda: "seconds since each trial started" in chart(screen),
                          "the time axis", timeout=30)
        assert screen.reads["times"] == 3
        assert [s for s, _ in screen.times[str(ids[1])]][-1] == 400
    assert app.errors == []
