"""Issue 33, a new user's review of a 16-trial ASHA search (area X): the checkpoints panel
never cuts a number silently and shows UUIDs by their 8-character prefix where the whole one
does not fit (y still copies it whole); the screen says "loading…" until its first read;
log-type hyperparameters on log axes and categorical ones as axes of their own; the compare
legend's hyperparameters take the free width; whole batches on x; the sort and filter kept
per experiment; Tab between the two tables. Each at 80x24 and 200x50."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual.pilot import Pilot

from dettui.screens.compare import CompareScreen
from dettui.screens.experiment import ExperimentScreen, whole_ticks
from dettui.widgets.overlay import Figure
from dettui.widgets.plot import Axis, Curve, Dot, overlay, parallel, scatter
from dettui.widgets.rowtable import RowTable
from tests.poll import until_async
from tests.tui.fixed import ASHA_TRIALS, AshaClient, FixedDashboard

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
UUID = "6b8f2ab8-fc66-485e-83b5-f15023eb{:04d}"


class ManyCheckpoints(AshaClient):
    """Checkpoints that come a few first, then more than the panel has rows (a scrollbar
    shows); metrics 4.524 and 0.369."""

    count = 5

    async def checkpoints(self, exp_id: int) -> list[dict[str, Any]]:
        return [{"uuid": UUID.format(i), "state": "STATE_COMPLETED",
                 "metadata": {"steps_completed": 4 * i},
                 "training": {"trialId": i % 16 + 1,
                              "searcherMetric": 4.524 if i % 2 else 0.369}}
                for i in range(self.count)]


async def opened(pilot: Pilot[None]) -> ExperimentScreen:
    app = pilot.app
    await pilot.pause(0.3)
    await pilot.press("2")
    await pilot.pause(0.3)
    await pilot.press("enter")
    await until_async(lambda: isinstance(app.screen, ExperimentScreen)
                      and app.screen.table.total_count == 16, "the 16 trials", timeout=15)
    await pilot.pause(0.3)
    screen = app.screen
    assert isinstance(screen, ExperimentScreen)
    return screen


def lines(table: RowTable) -> list[str]:
    """The rows as seen: the part beside the scrollbar, if one shows."""
    width = table.scrollable_content_region.width
    return [table.render_line(y).text[:width] for y in range(table.size.height)]


@pytest.mark.parametrize("size", SIZES)
async def test_checkpoint_numbers_are_never_cut_and_narrow_uuids_are_prefixes(
        size: str) -> None:
    app = FixedDashboard(client=ManyCheckpoints)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        client = app.client
        assert isinstance(client, ManyCheckpoints)
        client.count = 30  # more than the panel's rows: a scrollbar comes
        screen.refresh_checkpoints()
        ckpts = screen.query_one("#checkpoints", RowTable)
        await until_async(lambda: ckpts.total_count == 30, "30 checkpoints", timeout=10)
        await pilot.pause(0.3)
        shown = lines(ckpts)
        header = shown[0]
        assert "Steps" in header and "Metric" in header, header
        for line in shown[1:]:
            if line.strip():
                assert line.rstrip().endswith(("4.524", "0.369", "COMPLETED")), line
                assert ("4.524" in line) != ("0.369" in line), line
        if size == "80x24":
            assert all(len(w) == 8 for line in shown[1:] if line.strip()
                       for w in line.split()[1:2]), shown
        # Tab: the checkpoints table; y copies the whole UUID it shows a prefix of
        copied: list[str] = []
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.press("tab")
        await pilot.pause(0.1)
        assert ckpts.has_focus
        await pilot.press("y")
        await pilot.pause(0.1)
        assert copied == [UUID.format(0)]
        await pilot.press("tab")
        await pilot.pause(0.1)
        assert screen.table.has_focus
    assert app.errors == []


def test_tab_is_a_binding_with_a_description() -> None:
    keys = {b.key: b for b in ExperimentScreen.BINDINGS if not isinstance(b, tuple)}
    assert keys["tab"].description == "Checkpoints/Trials"  # type: ignore[union-attr]


class Slow(AshaClient):
    """A master under load: the experiment and its trials come when `go` is set."""

    go: asyncio.Event

    def __init__(self, agents: list[dict[str, Any]] | None = None) -> None:
        super().__init__(agents)
        self.go = asyncio.Event()

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        await self.go.wait()
        return await super().experiment(exp_id)

    async def changes(self, topics: list[str], **kw: Any) -> AsyncIterator[dict[str, Any]]:
        if topics == ["experiment:1"]:
            await self.go.wait()
        async for change in super().changes(topics, **kw):
            yield change


@pytest.mark.parametrize("size", SIZES)
async def test_the_screen_says_loading_until_the_first_read(size: str) -> None:
    app = FixedDashboard(client=Slow)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.pause(0.3)
        await pilot.press("2")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.5)
        screen = app.screen
        assert isinstance(screen, ExperimentScreen)
        said = {s: str(screen.query_one(s).render()) for s in ("#title", "#legend",
                                                                "#chart-title")}
        assert "loading…" in said["#title"] and "loading trials…" in said["#legend"], said
        assert "loading…" in said["#chart-title"] and "0 trials" not in said["#legend"]
        client = app.client
        assert isinstance(client, Slow)
        client.go.set()
        await until_async(lambda: screen.table.total_count == 16, "the trials", timeout=10)
        await pilot.pause(0.3)
        assert "16 trials" in str(screen.query_one("#legend").render())
        assert "loading" not in str(screen.query_one("#title").render())
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_sort_and_filter_are_kept_when_the_experiment_is_opened_again(
        size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        await pilot.press("S")
        await pilot.pause(0.3)
        box = app.screen.query_one("Input")
        box.value = ""  # type: ignore[attr-defined]
        await pilot.press(*"-best", "enter")
        await pilot.pause(0.3)
        await pilot.press("slash", *"state:completed", "enter")
        await pilot.pause(0.3)
        assert screen.table.sort_column == "best" and screen.table.row_count == 15
        app.pop_screen()  # back to the experiments (as Back does once the filter is off)
        await pilot.pause(0.3)
        screen = await opened(pilot)
        await until_async(lambda: screen.table.sort_column == "best", "the sort", timeout=5)
        assert screen.table.sort_reverse and screen.table.filter_text == "state:completed"
        assert screen.table.row_count == 15
        order = screen.table.keys_in_view_order
        best = {str(t["id"]): t["bestValidation"]["metrics"]["avgMetrics"]["validation_loss"]
                for t in ASHA_TRIALS}
        assert [best[k] for k in order] == sorted((best[k] for k in order), reverse=True)
        assert "state:completed" in str(screen.query_one("#legend").render())
    assert app.errors == []


def test_whole_batch_ticks() -> None:
    assert whole_ticks(50, 250, 44) == [50, 100, 150, 200, 250]
    for low, high, width in ((1, 7, 200), (0, 3, 80), (50, 240, 130), (4, 48, 60)):
        ticks = whole_ticks(low, high, width)
        assert ticks and all(isinstance(t, int) and low <= t <= high for t in ticks)


def test_overlay_x_labels_are_whole_batches() -> None:
    curve = Curve("red", [1, 2, 3, 4, 5, 6, 7], [0.9, 0.8, 0.6, 0.5, 0.45, 0.4, 0.38])
    for width in (80, 200):
        rows = overlay([curve], width, 20, whole_x=True).rows
        labels = rows[-2].plain.split()
        assert labels and all(lab.isdigit() for lab in labels), labels


LRS = [0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.004, 0.01, 0.03, 0.1, 0.3]


def test_scatter_on_a_log_axis_spreads_decades() -> None:
    dots = [Dot("red", lr, 0.5 + i / 20) for i, lr in enumerate(LRS)]
    linear = scatter(dots, 120, 20, x_title="lr").rows
    log = scatter(dots, 120, 20, x_title="lr", log_x=True).rows

    def columns(rows: list[Any]) -> set[int]:
        return {r.plain.index("●") for r in rows if "●" in r.plain}

    assert len(columns(log)) == len(LRS) > len(columns(linear))
    assert "log scale" in log[-1].plain and "0.001" in log[-2].plain


def test_parallel_has_log_and_categorical_axes() -> None:
    axes = [Axis("lr", log=True), Axis("optimizer", categories=("adam", "rmsprop", "sgd")),
            Axis("best loss")]
    lines = [("red", [lr, float(i % 3), 0.2 + i / 50]) for i, lr in enumerate(LRS)]
    rows = [r.plain for r in parallel(axes, lines, 150, 30).rows]
    text = "\n".join(rows)
    for word in ("adam", "rmsprop", "sgd", "lr (log)", "optimizer", "0.3", "0.0001"):
        assert word in text, word


class LogSearch(AshaClient):
    """The ASHA search's config: lr searched on a log scale."""

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        got = await super().experiment(exp_id)
        hp = {"optimizer": {"lr": {"type": "log", "minval": -4, "maxval": -0.5, "base": 10},
                            "momentum": {"type": "categorical", "vals": [0.9, 0.99]}},
              "activation": {"type": "categorical", "vals": ["relu", "tanh"]}}
        return {**got, "config": {**got["config"], "hyperparameters": hp}}


async def compared(pilot: Pilot[None], ids: list[int]) -> CompareScreen:
    await pilot.pause(0.3)
    screen = CompareScreen(1, ids, metric="validation_loss", group="validation",
                           smaller_is_better=True)
    await pilot.app.push_screen(screen)
    await until_async(lambda: len(screen.series) == len(ids) and len(screen.trials) == len(ids)
                      and bool(screen.log_names), "the series, trials and config", timeout=15)
    await pilot.pause(0.3)
    return screen


def chart(screen: CompareScreen) -> str:
    return "\n".join(r.plain for r in screen.query_one(Figure).drawn().rows)


@pytest.mark.parametrize("size", SIZES)
async def test_compare_reads_log_hparams_and_draws_categories(size: str) -> None:
    app = FixedDashboard(client=LogSearch)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await compared(pilot, [1, 4, 8, 12, 16])
        assert screen.log_names == {"optimizer.lr"}
        screen.hparam = "optimizer.lr"
        screen.view = "scatter"
        await pilot.pause(0.3)
        assert "log scale" in chart(screen), chart(screen)
        await pilot.press("P")
        await pilot.pause(0.3)
        drawn = chart(screen)
        if size == "80x24":
            assert "at least 120 columns" in drawn
        else:
            for word in ("optimizer.lr (log)", "activation", "relu", "tanh"):
                assert word in drawn, word
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_compare_legend_hyperparameters_take_the_free_width(size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.pause(0.3)
        screen = CompareScreen(1, [1, 2], metric="validation_loss", group="validation",
                               smaller_is_better=True)
        await app.push_screen(screen)
        await until_async(lambda: len(screen.series) == 2 and len(screen.trials) == 2,
                          "the trials", timeout=15)
        await pilot.pause(0.3)
        legend = screen.table
        row = next(line for line in lines(legend) if "● 1" in line)
        note = ("optimizer.lr=0.0008, optimizer.momentum=0.9, hidden=32, dropout=0.05, "
                "activation=tanh")
        assert len(note) > 40
        if size == "200x50":
            assert note in row, row
        else:
            assert row.rstrip().endswith("…") and len(row.rstrip()) <= 80, row
    assert app.errors == []


def test_asha_trials_have_the_hparams_the_tests_name() -> None:
    assert set(ASHA_TRIALS[0]["hparams"]) == {"optimizer", "hidden", "dropout", "activation"}
