"""A whole number past a float's range (`huge: 10**400` is valid YAML and JSON) is shown as it
is and never breaks a table or a ranking: the trials table stayed empty with "OverflowError:
int too large to convert to float" for everyone who opened such an experiment."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from dettui.widgets.columns import Column
from dettui.widgets.rowtable import RowTable
from dettui.widgets.shown import number
from dettui.widgets.trial_table import TrialTable, ranked

HUGE = 10**400


def test_number_is_none_for_an_int_past_a_floats_range() -> None:
    assert number(HUGE) is None and number(-HUGE) is None
    assert number(3) == 3.0 and number(float("nan")) is None and number(True) is None


def test_the_trials_table_takes_a_huge_hyperparameter_and_metric() -> None:
    trials = [{"id": 1, "state": "COMPLETED", "hparams": {"huge": HUGE, "lr": 0.1},
               "bestValidation": {"metrics": {"avgMetrics": {"loss": HUGE}}}},
              {"id": 2, "state": "COMPLETED", "hparams": {"huge": 5, "lr": 0.2},
               "bestValidation": {"metrics": {"avgMetrics": {"loss": 0.5}}}}]
    table = TrialTable()
    table.see(trials)
    assert {c.key for c in table.columns()} >= {"id", "state"}
    rows = [table.row(t) for t in trials]
    assert any(str(HUGE) in map(str, r.values()) for r in rows)
    assert ranked(trials, "loss", smaller_is_better=True) == ["2"]


def test_a_comparison_filter_on_a_huge_cell_counts_it_infinite() -> None:
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield RowTable([Column("id", "Id"), Column("huge", "huge")], id="t")

    async def run() -> list[str]:
        app = One()
        async with app.run_test(size=(80, 10)) as pilot:
            table = app.query_one(RowTable)
            table.set_rows([("a", {"id": 1, "huge": HUGE}), ("b", {"id": 2, "huge": 5})])
            table.set_filter("huge>1e300")
            await pilot.pause()
            return list(table.keys_in_view_order)

    assert asyncio.run(run()) == ["a"]
