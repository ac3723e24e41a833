"""RowTable: only visible rows are rendered; diffs, sort, filter, cursor, bindings, header."""

from __future__ import annotations

import random
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.strip import Strip

from dettui.widgets import Column, RowTable
from dettui.widgets.rowtable import CACHE_LINES, MAX_FIT, default_sort_key

COLUMNS = [Column("n", "#", align="right"), Column("name", "Name"), Column("state", "State"),
           Column("prio", "Priority", width=8, align="right")]
Row = tuple[str, dict[str, Any]]


def job(i: int, state: str = "", prio: int = 42) -> dict[str, Any]:
    return {"n": i, "name": f"job-{i:05d}",
            "state": state or ("RUNNING" if i % 3 else "QUEUED"), "prio": prio}


def rows(n: int) -> list[Row]:
    return [(f"k{i}", job(i)) for i in range(n)]


class One(App[None]):
    def __init__(self, columns: list[Column] | None = None) -> None:
        super().__init__()
        self.columns = columns or COLUMNS
        self.selected: list[str] = []
        self.moved: list[str | None] = []

    def compose(self) -> ComposeResult:
        yield RowTable(self.columns, id="t")

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        self.selected.append(event.key)

    def on_row_table_cursor_moved(self, event: RowTable.CursorMoved) -> None:
        self.moved.append(event.key)


def count_renders(table: RowTable) -> list[int]:
    calls: list[int] = []
    original = table.render_line

    def counting(y: int) -> Strip:
        calls.append(y)
        return original(y)

    table.render_line = counting  # type: ignore[method-assign]
    return calls


def line(table: RowTable, y: int) -> str:
    return table.render_line(y).text


async def test_ten_thousand_rows_render_only_what_is_visible() -> None:
    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        table.focus()
        calls = count_renders(table)
        table.set_rows(rows(10_000))
        await pilot.pause()
        height = table.size.height
        assert table.row_count == 10_000 == table.total_count
        assert table.virtual_size == (table._total_width(), 10_001)
        assert 0 < len(calls) <= 2 * height, "only the lines on screen are rendered"
        assert len(table._cache) < height, "one cached strip per row on screen"
        calls.clear()
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_key == "k9999" and "job-09999" in line(table, height - 1)
        assert 0 < len(calls) <= 2 * height
        for _ in range(60):  # 60 pages: more rows than the strip cache holds
            await pilot.press("pageup")
        assert len(table._cache) <= CACHE_LINES, "the strip cache is bounded"


async def test_an_update_repaints_only_the_changed_lines_on_screen() -> None:
    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        table.set_rows(rows(10_000))
        await pilot.pause()
        calls = count_renders(table)
        table.apply(upsert=[("k5000", job(5000, "DONE"))])  # off screen
        await pilot.pause()
        assert calls == []
        table.apply(upsert=[("k3", job(3, "DONE"))])  # the fourth row: line 4 under the header
        await pilot.pause()
        assert calls == [4] and "DONE" in line(table, 4)


async def test_apply_upserts_removes_appends_and_reorders_keeping_the_cursor() -> None:
    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        table.focus()
        table.set_rows(rows(5))
        table.move_cursor_to_key("k3")
        table.apply(upsert=[("k3", {"n": 3, "name": "renamed", "state": "DONE", "prio": 1}),
                            ("k9", job(9))], remove=["k0", "nope"])
        assert table.keys_in_view_order == ["k1", "k2", "k3", "k4", "k9"], "updated in place"
        assert table.row("k3")["name"] == "renamed" and table.cursor_key == "k3"  # type: ignore
        assert table.row("k0") is None and table.total_count == 5
        table.apply(order=["k9", "k4", "k3", "k2", "k1"])
        assert table.keys_in_view_order == ["k9", "k4", "k3", "k2", "k1"]
        assert (table.cursor_key, table.cursor_index) == ("k3", 2), "the cursor follows its key"
        table.apply(upsert=[("k7", job(7))], order=["k7", "k1"])  # new key placed by `order`
        assert table.keys_in_view_order == ["k7", "k1", "k9", "k4", "k3", "k2"]
        table.apply(upsert=[("k8", job(8))])  # no order: new keys go last
        assert table.keys_in_view_order[-1] == "k8"
        table.apply(remove=["k3"])  # the cursor's row goes: the cursor stays at its index
        assert table.cursor_key == "k2" and table.cursor_index == 4
        table.set_rows([])
        await pilot.pause()
        assert table.cursor_key is None and table.row_count == 0
        assert app.moved[-3:] == ["k3", "k2", None], "CursorMoved on every change of row"


def reference_view(natural: list[str], data: dict[str, dict[str, Any]], needle: str,
                   column: str | None, reverse: bool) -> list[str]:
    """The view computed from scratch: filter on cell texts, then a stable sort."""
    keys = [k for k in natural
            if any(needle.casefold() in str(v).casefold() for v in data[k].values())]
    if column is not None:
        keys.sort(key=lambda k: default_sort_key(data[k][column]), reverse=reverse)
    return keys


async def test_incremental_updates_match_a_view_built_from_scratch() -> None:
    app = One()
    rng = random.Random(7)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        natural = [f"k{i}" for i in range(300)]
        data = {k: job(i, prio=rng.randint(1, 5)) for i, k in enumerate(natural)}
        table.set_rows((k, data[k]) for k in natural)
        for step, (needle, column, reverse) in enumerate(
                [("", "prio", False), ("queued", None, False), ("1", "prio", True),
                 ("run", "state", False), ("job", "name", True)]):
            table.set_filter(needle)
            table.sort_by(column, reverse)
            for _ in range(20):
                upsert: list[Row] = []
                for k in rng.sample(sorted(data), 15):
                    i = data[k]["n"]
                    data[k] = job(i, rng.choice(["QUEUED", "RUNNING", "PAUSED"]),
                                  rng.randint(1, 5))
                    upsert.append((k, data[k]))
                for n in range(3):
                    k = f"n{step}-{len(natural)}-{n}"
                    data[k] = job(len(natural) + n, prio=rng.randint(1, 5))
                    upsert.append((k, data[k]))
                gone = rng.sample(sorted(set(data) - {k for k, _ in upsert}), 2)
                for k in gone:
                    del data[k]
                natural = [k for k in natural if k not in gone]
                natural += [k for k, _ in upsert if k not in natural]
                order = None
                if rng.random() < 0.2:
                    order = natural = rng.sample(natural, len(natural))
                cursor = table.cursor_key
                table.apply(upsert=upsert, remove=gone, order=order)
                expected = reference_view(natural, data, needle, column, reverse)
                assert table.keys_in_view_order == expected
                if cursor in expected:
                    assert table.cursor_key == cursor
        await pilot.pause()


async def test_sort_numbers_text_custom_keys_and_stable_ties() -> None:
    columns = [Column("n", "#", align="right"), Column("name", "Name"),
               Column("size", "Size", sort_key=lambda v: {"S": 0, "M": 1, "L": 2}[v])]
    app = One(columns)
    async with app.run_test(size=(80, 24)):
        table = app.query_one(RowTable)
        table.set_rows([("a", {"n": 10, "name": "beta", "size": "L"}),
                        ("b", {"n": 2, "name": "Alpha", "size": "S"}),
                        ("c", {"n": "9", "name": "gamma", "size": "M"}),
                        ("d", {"n": 2, "name": "alpha", "size": "S"})])
        table.sort_by("n")
        assert table.keys_in_view_order == ["b", "d", "c", "a"], "numerically; ties stay put"
        table.sort_by("n", reverse=True)
        assert table.keys_in_view_order == ["a", "c", "b", "d"], "reversed; ties still stay put"
        table.sort_by("name")
        assert table.keys_in_view_order == ["b", "d", "a", "c"], "casefolded"
        table.sort_by("size")
        assert table.keys_in_view_order == ["b", "d", "c", "a"], "by the column's sort_key"
        assert (table.sort_column, table.sort_reverse) == ("size", False)
        table.sort_by(None)
        assert table.keys_in_view_order == ["a", "b", "c", "d"] and table.sort_column is None
        try:
            table.sort_by("missing")
        except KeyError:
            pass
        else:
            raise AssertionError("sorting by an unknown column must fail")


async def test_filter_is_a_case_insensitive_substring_of_any_cell() -> None:
    app = One()
    async with app.run_test(size=(80, 24)):
        table = app.query_one(RowTable)
        table.set_rows(rows(30))
        table.set_filter("QUEUED")
        assert table.row_count == 10 and table.total_count == 30
        table.set_filter("queued")
        assert table.row_count == 10
        table.set_filter("job-0001")  # narrower: k10..k19
        assert table.keys_in_view_order == [f"k{i}" for i in range(10, 20)]
        table.set_filter("job-00012")
        assert table.keys_in_view_order == ["k12"] and table.cursor_key == "k12"
        table.apply(upsert=[("k40", job(40, "job-00012x"))])  # a new row that matches
        assert table.keys_in_view_order == ["k12", "k40"]
        table.set_filter("")
        assert table.row_count == 31


async def test_column_terms_filter_one_column_and_combine_with_text() -> None:
    app = One()
    async with app.run_test(size=(80, 24)):
        table = app.query_one(RowTable)
        table.set_rows([(f"k{i}", job(i, prio=1 if i < 5 else 42)) for i in range(30)])
        table.set_filter("state:queued")  # by key
        assert table.keys_in_view_order == [f"k{i}" for i in range(0, 30, 3)]
        table.set_filter("State:QUEUED prio:1")  # by title too; terms combine
        assert table.keys_in_view_order == ["k0", "k3"]
        table.set_filter("state:queued job-0000")  # a term and text in any cell
        assert table.keys_in_view_order == ["k0", "k3", "k6", "k9"]
        table.set_filter("name:queued")  # the word is in another column only: no match
        assert table.row_count == 0
        table.set_filter("nosuch:queued")  # not a column: plain text
        assert table.row_count == 0
        table.set_filter("prio:")  # no value: plain text, found nowhere
        assert table.row_count == 0
        table.set_filter("  state:running   ")
        assert table.row_count == 20 and table.filter_text == "state:running"
        table.apply(upsert=[("k0", job(0, "RUNNING"))])  # now matches the term
        assert table.keys_in_view_order[0] == "k0" and table.row_count == 21


async def test_bindings_move_the_cursor_and_enter_posts_selected() -> None:
    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        table.focus()
        table.set_rows(rows(100))
        await pilot.pause()
        page = table.scrollable_content_region.height - 1
        await pilot.press("down", "down")
        assert table.cursor_key == "k2"
        await pilot.press("up")
        assert table.cursor_key == "k1"
        await pilot.press("pagedown")
        assert table.cursor_index == 1 + page and table.scroll_y > 0, "scrolled to the cursor"
        await pilot.press("pageup")
        assert table.cursor_index == 1
        await pilot.press("end")
        assert table.cursor_key == "k99" and table.scroll_y == table.max_scroll_y
        await pilot.press("home")
        assert table.cursor_key == "k0" and table.scroll_y == 0
        await pilot.press("ctrl+end")
        assert table.cursor_key == "k99"
        await pilot.press("ctrl+home", "down", "enter")
        await pilot.pause()
        assert app.selected == ["k1"]
        assert app.moved[:3] == ["k0", "k1", "k2"]


async def test_data_updates_do_not_scroll_and_clicks_move_the_cursor() -> None:
    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RowTable)
        table.focus()
        table.set_rows(rows(1000))
        await pilot.pause()
        table.scroll_to(y=500, animate=False)
        table.apply(upsert=[("k0", job(0, "DONE")), ("k2000", job(2000))], remove=["k1"])
        await pilot.pause()
        assert table.scroll_y == 500 and table.cursor_key == "k0"
        await pilot.click(RowTable, offset=(2, 3))  # third row on screen
        assert table.cursor_key == table.keys_in_view_order[502]
        await pilot.click(RowTable, offset=(6, 0))  # the "Name" header: sort, then reverse
        assert (table.sort_column, table.sort_reverse) == ("name", False)
        await pilot.click(RowTable, offset=(6, 0))
        assert (table.sort_column, table.sort_reverse) == ("name", True)
        await pilot.click(RowTable, offset=(6, 0))
        assert table.sort_column is None


async def test_header_widths_arrow_and_styled_cells() -> None:
    columns = [*COLUMNS, Column("note", "Note")]
    app = One(columns)
    async with app.run_test(size=(120, 24)) as pilot:
        table = app.query_one(RowTable)
        table.set_rows([("a", {**job(1), "note": Text("late", style="bold red")}),
                        ("b", {**job(2), "note": ("ok", "green")}),
                        ("c", {**job(3), "note": "x" * 100 + "\n"})])
        await pilot.pause()
        assert table._widths == [3, 9, 7, 8, MAX_FIT], "header, content, fixed, capped"
        header = line(table, 0)
        assert header.startswith("  #  Name       State    Priority  Note")
        table.sort_by("prio", reverse=True)
        table.sort_by("n")
        await pilot.pause()
        assert line(table, 0).startswith("# ▲  Name"), "the arrow shows, even in a narrow column"
        table.sort_by("prio", reverse=True)
        assert "Prior… ▼" in line(table, 0), "the label gives way to the arrow"
        row_a = table.render_line(1)  # reversed, ties in natural order: a, b, c
        texts = {seg.text.strip(): seg.style for seg in row_a if seg.text.strip()}
        assert isinstance(texts["late"], Style) and texts["late"].bold
        assert texts["late"].color is not None and texts["late"].color.name == "red"
        row_b = table.render_line(2)
        assert any(s.text.strip() == "ok" and s.style and s.style.color.name == "green"  # type: ignore
                   for s in row_b)
        row_c = line(table, 3)
        assert "x" * (MAX_FIT - 1) + "…" in row_c and "\n" not in row_c
        assert table.render_line(1).cell_length == table.size.width
        table.set_filter("LATE")
        assert table.keys_in_view_order == ["a"], "rich text is filtered on its plain text"
        table.apply(upsert=[("w", {**job(4), "name": "wide-名前-" + "y" * 20})])
        assert table._widths[1] == 30, "a wider value (in cells) widens a fitted column"
