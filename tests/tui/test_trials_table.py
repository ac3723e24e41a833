"""Issue 33, items 1 and 6 on the experiment screen: the trials table has a column per
hyperparameter (flattened, numbers right-aligned and sorted as numbers) and per metric, marks
trials the searcher stopped early, sorts by any column, filters with comparisons
(`lr>0.01 state:completed`), selects trials to compare (space, top N, C), shows a running
trial's CPU, RSS and GPU, and copies a trial id or a checkpoint UUID (y). Pilot tests at 80x24
and 200x50 with a fixed 16-trial ASHA search (tests/tui/fixed.py), and the table's own parts."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Input

from dettui.screens.compare import CompareScreen
from dettui.screens.experiment import ExperimentScreen
from dettui.widgets.rowtable import Column, RowTable
from dettui.widgets.shown import Shown
from dettui.widgets.trial_colours import colour
from dettui.widgets.trial_table import MAX_HPARAMS, TrialTable, flatten, ranked, spark
from tests.poll import until_async
from tests.tui.fixed import ASHA_TRIALS, AshaClient, FixedDashboard

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
UUID = "6b8f2ab8-fc66-485e-83b5-f15023eb2e82"  # the fixed client's one checkpoint


def hp(trial_id: int, name: str) -> Any:
    return flatten(ASHA_TRIALS[trial_id - 1]["hparams"])[name]


def loss(trial_id: int) -> float:
    return float(ASHA_TRIALS[trial_id - 1]["bestValidation"]["metrics"]["avgMetrics"][
        "validation_loss"])


# -- the table's parts ------------------------------------------------------------------------


class One(App[None]):
    def __init__(self, columns: list[Column]) -> None:
        super().__init__()
        self.columns = columns
        self.refused: list[str] = []
        self.arranged: list[list[str]] = []

    def compose(self) -> ComposeResult:
        yield RowTable(self.columns)

    def on_row_table_filter_refused(self, event: RowTable.FilterRefused) -> None:
        self.refused.append(event.error)

    def on_row_table_arranged(self, event: RowTable.Arranged) -> None:
        self.arranged.append(event.hidden)


def rows(n: int) -> list[tuple[str, dict[str, Any]]]:
    return [(str(i), {"id": i, "state": "COMPLETED" if i % 2 else "RUNNING",
                      "lr": Shown(0.001 * 3 ** i, f"{0.001 * 3 ** i:.2g}"), "text": f"t{i}"})
            for i in range(n)]


COLUMNS = [Column("id", "Trial", width=5, align="right"), Column("state", "State"),
           Column("lr", "optimizer.lr", align="right", priority=1)]


async def test_comparisons_filter_on_the_cells_number_and_combine_with_terms() -> None:
    app = One(COLUMNS)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        table.set_rows(rows(8))
        # lr: 0.001, 0.003, 0.009, 0.027, 0.081, 0.243, 0.729, 2.187 (shown to 2 digits)
        table.set_filter("lr>0.01")  # by the end of a dotted title
        assert table.keys_in_view_order == ["3", "4", "5", "6", "7"]
        table.set_filter("optimizer.lr<=0.027 state:completed")  # full title; AND a term
        assert table.keys_in_view_order == ["1", "3"]
        table.set_filter("lr<=2.7e-2 id>=2 id!=3")
        assert table.keys_in_view_order == ["2"]
        table.set_filter("lr>0.7295")  # on the number (0.729), not its shown text (0.73)
        assert table.keys_in_view_order == ["7"]
        table.set_filter("id=5 complete")  # and text in any cell
        assert table.keys_in_view_order == ["5"]
        table.apply(upsert=[("5", {**rows(8)[5][1], "id": 50})])  # no longer matches
        assert table.row_count == 0
        table.set_filter("state:completed lr>0.1")
        assert table.keys_in_view_order == ["5", "7"]
        for bad, says in [("lr>abc", "'abc' is not a number"), ("nosuch<3", "no column"),
                          ("lr>", "is not a number")]:
            table.set_filter(bad)
            await pilot.pause()
            assert says in app.refused[-1], app.refused
            assert table.filter_text == "state:completed lr>0.1", "the filter was kept"
            assert table.keys_in_view_order == ["5", "7"]
            assert any(says in n.message for n in app._notifications)
        table.set_filter("nosuch:x")  # as before: no column of that name, so text
        assert table.row_count == 0 and table.filter_unknown == ["nosuch:x"]
        table.set_filter("[link=x]")  # no column and no number: text too (markup, a URL)
        assert table.row_count == 0 and table.filter_unknown == ["[link=x]"]
        table.apply(upsert=[("9", {"id": 9, "state": "[link=x]", "lr": 1.0})])
        assert table.keys_in_view_order == ["9"]


async def test_columns_change_keeping_rows_sort_and_filter() -> None:
    app = One(COLUMNS[:2])
    async with app.run_test(size=(40, 20)) as pilot:
        table = app.query_one(RowTable)
        table.set_rows(rows(6))
        table.sort_by("state")
        table.set_filter("id>=1")
        assert "lr" not in table.header_text()
        wide = [*COLUMNS, Column("text", "Text", priority=2), Column("x", "a.long.column.name",
                                                                     priority=3)]
        table.set_columns(wide)
        await pilot.pause()
        assert table.sort_column == "state" and table.filter_text == "id>=1"
        assert table.keys_in_view_order == ["1", "3", "5", "2", "4"]
        table.set_filter("lr<0.01")  # the new column filters, on its numbers
        assert table.keys_in_view_order == ["1", "0", "2"]
        table.sort_by("lr", reverse=True)
        assert table.keys_in_view_order == ["2", "1", "0"]
        assert table.hidden_columns == ["x"], "the narrow table leaves out the least"
        assert app.arranged[-1] == ["x"]
        assert "0.009" in table.render_line(1).text  # the shown text, right-aligned
        table.set_columns(COLUMNS[:2])  # the sorted and filtered-on column goes
        assert table.sort_column is None and table.filter_text == ""
        assert table.row_count == 6


def test_trial_columns_come_from_the_trials_seen() -> None:
    table = TrialTable(metric="validation_loss")
    assert table.see(ASHA_TRIALS[:1])
    keys = [c.key for c in table.columns()]
    assert keys[:6] == ["id", "sel", "state", "steps", "best", "m.validation_loss"]
    assert {"h.optimizer.lr", "h.optimizer.momentum", "h.hidden", "h.dropout",
            "h.activation", "m.accuracy"} <= set(keys)
    assert "cpu" not in keys and not table.see(ASHA_TRIALS[1:15])  # nothing new
    assert table.see(ASHA_TRIALS[15:])  # the running trial reports CPU, RSS and GPU
    by_key = {c.key: c for c in table.columns()}
    assert {"cpu", "rss", "gpu"} <= set(by_key)
    assert by_key["h.optimizer.lr"].align == "right" and by_key["h.activation"].align == "left"
    row = table.row(ASHA_TRIALS[15], selected=2)
    assert row["sel"] == ("●", f"bold {colour(2)}") and row["state"] == "RUNNING"
    assert str(row["cpu"]) == f"{spark([12.0, 40.0, 85.0, 99.0, 97.0])} 97%"
    assert float(row["cpu"]) == 97.0 and str(row["rss"]) == "734.0 MiB"
    assert str(row["gpu"]) == "88% 31.0 GiB"
    assert table.row(ASHA_TRIALS[0])["state"] == "COMPLETED ⇣"
    assert ranked(ASHA_TRIALS, "validation_loss", True)[:3] == ["11", "10", "12"]
    assert ranked(ASHA_TRIALS, "validation_loss", False)[:2] == ["1", "2"]
    assert flatten({"a": {"b": {"c": 1}}, "d": [1, 2]}) == {"a.b.c": 1, "d": [1, 2]}


# -- the experiment screen -------------------------------------------------------------------


async def opened(pilot: Pilot[None]) -> ExperimentScreen:
    app = pilot.app
    await pilot.press("2")
    await pilot.pause(0.3)
    await pilot.press("enter")
    await until_async(lambda: isinstance(app.screen, ExperimentScreen)
                      and app.screen.table.total_count == 16, "the 16 trials", timeout=15)
    screen = app.screen
    assert isinstance(screen, ExperimentScreen)
    await pilot.pause(0.2)
    return screen


def legend(screen: ExperimentScreen) -> str:
    return str(screen.query_one("#legend").render())


async def type_filter(pilot: Pilot[None], text: str) -> None:
    await pilot.press("slash", *text, "enter")
    await pilot.pause(0.3)


async def answer(pilot: Pilot[None], text: str) -> None:
    """Type `text` into the prompt just opened (replacing what it offers) and press Enter."""
    await pilot.pause(0.3)
    box = pilot.app.screen.query_one(Input)
    box.value = ""
    await pilot.press(*text, "enter")
    await pilot.pause(0.3)


@pytest.mark.parametrize("size", SIZES)
async def test_columns_marks_and_resources_fit_the_screen(size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        table = screen.table
        header = table.header_text()
        assert "optimizer.lr" in header and "Best" in header
        assert (table.row("1") or {})["state"] == "COMPLETED ⇣"
        assert (table.row("16") or {})["state"] == "RUNNING"
        assert "⇣ stopped early" in legend(screen)
        assert str((table.row("16") or {})["cpu"]).endswith(" 97%")
        if size == "80x24":
            hidden = table.hidden_columns
            assert {"cpu", "rss", "h.activation"} <= set(hidden)
            said = legend(screen)
            assert f"+{len(hidden)} columns (S sorts by any" in said, said
            assert len(said) <= 78 and "…" not in said, "the legend fits, nothing cut"
        else:
            assert "⇣ stopped early by the searcher" in legend(screen)
            assert table.hidden_columns == [] and "hidden" not in legend(screen)
            for label in ("optimizer.momentum", "dropout", "activation", "accuracy", "CPU",
                          "RSS", "GPU"):
                assert label in header, label
            line = next(table.render_line(y).text for y in range(1, 18)
                        if table.render_line(y).text.split()[0] == "16")
            assert "97%" in line and "734.0 MiB" in line and "88% 31.0 GiB" in line
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_sort_and_filter_by_hyperparameters_and_metrics(size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        table = screen.table
        by_lr = sorted(range(1, 17), key=lambda i: hp(i, "optimizer.lr"))
        await pilot.press("S")
        await answer(pilot, "-lr")  # descending, by the end of optimizer.lr
        assert table.sort_column == "h.optimizer.lr" and table.sort_reverse
        assert table.keys_in_view_order == [str(i) for i in reversed(by_lr)]
        await pilot.press("S")
        await answer(pilot, "best")
        assert table.keys_in_view_order[:3] == ["11", "10", "12"]  # smallest loss first
        await type_filter(pilot, "lr>0.01 state:completed validation_loss<1 best<0.4")
        want = [str(i) for i in sorted(range(1, 16), key=loss)
                if hp(i, "optimizer.lr") > 0.01 and loss(i) < 0.4]
        assert want and table.keys_in_view_order == want
        assert f"{len(want)} of 16 trials" in legend(screen)
        await pilot.press("slash", "end", *" momentum=0.99", "enter")  # after what it holds
        await pilot.pause(0.3)
        assert table.keys_in_view_order == [k for k in want
                                            if hp(int(k), "optimizer.momentum") == 0.99]
        box = screen.query_one("#filter", Input)
        box.value = ""
        await type_filter(pilot, "lr>0.01x")
        assert box.has_focus and box.has_class("-refused"), "the box keeps the text to fix"
        assert any("'0.01x' is not a number" in n.message for n in app._notifications)
        assert table.filter_text.startswith("lr>0.01 state:completed"), "the filter was kept"
        box.value = ""  # the box has the focus still: the text is typed right in
        await pilot.press(*"learning>1", "enter")
        await pilot.pause(0.3)
        assert any("no column 'learning'" in n.message for n in app._notifications)
        await pilot.press("escape", "escape")  # clears the box and the filter, closes it
        await pilot.pause(0.2)
        assert table.row_count == 16 and isinstance(app.screen, ExperimentScreen)
        assert table.has_focus
        await pilot.press("escape")  # now goes back
        await until_async(lambda: not isinstance(app.screen, ExperimentScreen), "back",
                          timeout=15)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_select_top_n_and_compare(size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        table = screen.table
        await pilot.press("space", "down", "down", "space")
        await pilot.pause(0.2)
        assert screen.selected == ["1", "3"]
        assert (table.row("1") or {})["sel"] == ("●", f"bold {colour(0)}")
        assert (table.row("3") or {})["sel"] == ("●", f"bold {colour(1)}")
        marker = next(s for s in table.render_line(1) if s.text == "●")  # after the id
        assert marker.style is not None and marker.style.color is not None
        assert marker.style.color.name == colour(0)
        await pilot.press("up", "up", "space")  # trial 1 leaves: trial 3 takes colour 0
        await pilot.pause(0.2)
        assert screen.selected == ["3"] and (table.row("1") or {})["sel"] is None
        assert (table.row("3") or {})["sel"] == ("●", f"bold {colour(0)}")
        await pilot.press("T")
        await answer(pilot, "3")
        assert screen.selected == ["11", "10", "12"]  # best validation_loss first
        assert (table.row("3") or {})["sel"] is None
        assert "● 3 selected" in legend(screen)
        await pilot.press("T")
        await answer(pilot, "zero")
        assert any("a whole number from 1 to 100" in n.message for n in app._notifications)
        await pilot.press("C")
        await pilot.pause(0.5)
        assert isinstance(app.screen, CompareScreen)
        assert app.screen.trial_ids == [11, 10, 12]  # colour i is trial_ids[i]
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_c_with_nothing_selected_compares_the_top_ten(size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        await pilot.press("C")
        await pilot.pause(0.5)
        assert screen.selected == ranked(ASHA_TRIALS, "validation_loss", True)[:10]
        assert screen.selected[:3] == ["11", "10", "12"]
        assert isinstance(app.screen, CompareScreen)
        assert app.screen.trial_ids == [int(k) for k in screen.selected]
        assert app.screen.metric == "validation_loss" and app.screen.smaller_is_better
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_y_copies_the_trial_id_or_the_checkpoint_uuid(size: str) -> None:
    app = FixedDashboard(client=AshaClient)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(pilot)
        await pilot.press("down", "y")
        await pilot.pause(0.2)
        assert app.clipboard == "2"
        assert any(n.message == "trial id 2" and n.title == "copied to the clipboard"
                   for n in app._notifications)
        ckpts = screen.query_one("#checkpoints", RowTable)
        await until_async(lambda: ckpts.row_count == 1, "the checkpoint", timeout=15)
        ckpts.focus()
        await pilot.pause(0.2)
        await pilot.press("y")
        await pilot.pause(0.2)
        assert app.clipboard == UUID
        assert any(n.message == f"checkpoint UUID {UUID}" for n in app._notifications)
    assert app.errors == []


def test_a_hostile_hyperparameter_name_is_a_plain_label() -> None:
    table = TrialTable(metric="m")
    table.see([{"id": 1, "hparams": {"[bold]x\x1b[31m": 1.0}}])
    label = next(c.label for c in table.columns() if c.key.startswith("h."))
    assert "\x1b" not in label and isinstance(Text(label), Text)


def test_hyperparameter_columns_have_a_cap_and_the_rest_are_counted() -> None:
    table = TrialTable(metric="m")
    table.see([{"id": 1, "hparams": {f"p{i:03d}": i for i in range(MAX_HPARAMS + 6)}}])
    assert sum(c.key.startswith("h.") for c in table.columns()) == MAX_HPARAMS
    assert table.more_hparams == 6
