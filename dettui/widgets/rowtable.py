"""RowTable: a keyed, sortable, filterable table that renders only the rows on screen.

Rows are dicts under string keys. The view (rows left by the filter, in sort order) is kept
incrementally: `apply()` re-checks only the rows it is given. A row whose filter match and sort
value are unchanged stays where it is. A row that moves is taken out and put back by binary
search, which costs one C-speed pass over the key list for the removal. Only `order=`,
`sort_by()`, `set_columns()` (new hyperparameters, say: every row's texts are made again, once)
and a filter that widens rebuild the whole view. Lines come from Textual's
line API (`render_line`) on demand and are cached per row key and width, so 10,000 rows paint
as fast as 50.
"""

from __future__ import annotations

import math
import operator
import re
from bisect import insort
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from dettui.widgets.cells import Descending, cell_text, default_sort_key, fit, styled_pair
from dettui.widgets.columns import GAP, Column, arrange

__all__ = ["Column", "FilterError", "RowTable", "cell_text", "default_sort_key"]

MIN_WIDTH = 3  # a fitted column is at least this wide
MAX_FIT = 40  # ... and never grows past this many cells
CACHE_LINES = 512  # rendered row strips kept (a few screens' worth)
RESORT_AT = 1_000  # a diff moving more rows than this sorts the view again instead
_EVEN, _ODD, _CURSOR = 0, 1, 2
# `lr>0.01`, `loss<=0.5`, `steps=100`, `restarts!=0`: a column, a comparison, a number
_COMPARE = re.compile(r"([^<>=!:\s]+)(<=|>=|!=|<|>|=)(.*)")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "=": operator.eq, "!=": operator.ne}
Compare = tuple[int, Callable[[float, float], bool], float]  # column index, op, number


class FilterError(ValueError):
    """A filter that cannot be applied as typed: a comparison on an unknown column or with
    something that is not a number (`lr>abc`). The table keeps the filter it had."""


class RowTable(ScrollView, can_focus=True):
    """A virtualised table of keyed rows; see the module docstring for the costs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first", "First row", show=False, key_display="home"),
        Binding("end,ctrl+end", "last", "Last row", show=False, key_display="end"),
        Binding("enter", "select", "Open", tooltip="Open the selected row"),
    ]
    DEFAULT_CSS = """
    RowTable { background: $surface; }
    RowTable > .rowtable--header { text-style: bold; background: $panel; }
    RowTable > .rowtable--cursor { background: $accent; color: $text; }
    RowTable > .rowtable--odd { background: $surface-lighten-1; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rowtable--header", "rowtable--cursor", "rowtable--odd",
    }

    class Selected(Message):
        """Enter (or a double click) on a row."""

        def __init__(self, table: RowTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> RowTable:
            return self.table

    class FilterRefused(Message):
        """`set_filter` was given a filter it cannot apply (`error` says why); the table
        keeps the filter it had."""

        def __init__(self, table: RowTable, text: str, error: str) -> None:
            super().__init__()
            self.table = table
            self.text = text
            self.error = error

        @property
        def control(self) -> RowTable:
            return self.table

    class Arranged(Message):
        """The columns on screen changed (a resize, new columns): `hidden` are those left
        out for lack of width."""

        def __init__(self, table: RowTable, hidden: list[str]) -> None:
            super().__init__()
            self.table = table
            self.hidden = hidden

        @property
        def control(self) -> RowTable:
            return self.table

    class CursorMoved(Message):
        """The cursor is on another row (None: the view is empty)."""

        def __init__(self, table: RowTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> RowTable:
            return self.table

    def __init__(self, columns: Sequence[Column], *, name: str | None = None,
                 id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(name=name, id=id, classes=classes)
        self.columns: tuple[Column, ...] = tuple(columns)
        self._column = {c.key: c for c in self.columns}
        if len(self._column) != len(self.columns):
            raise ValueError("column keys must be unique")
        self._rows: dict[str, dict[str, Any]] = {}
        self._texts: dict[str, list[str]] = {}  # plain cell texts per row
        self._haystacks: dict[str, str] = {}  # casefolded texts, made when a filter needs them
        self._seq: dict[str, int] = {}  # natural position; the dict's order is natural order
        self._next_seq = 0
        self._sort_values: dict[str, Any] = {}  # per row, for the sorted column only
        self._view: list[str] = []  # what is shown, top to bottom
        self._widths = self._header_widths()  # what each column wants
        self._shown = list(self._widths)  # what each gets on screen (0: left out)
        self._cache: LRUCache[tuple[str, int, int], Strip] = LRUCache(CACHE_LINES)
        self._filter = ""  # as given, casefolded
        self._needle = ""  # the plain-text part of the filter
        self._terms: list[tuple[int, str]] = []  # (column index, text) of `column:text` parts
        self._compares: list[Compare] = []  # `column>number` parts
        self._unknown: list[str] = []  # `name:text` words whose name is no column's
        self._arranged: tuple[str, ...] | None = None  # the hidden columns last told
        self._sort_column: str | None = None
        self._sort_reverse = False
        self._cursor_key: str | None = None
        self._cursor_index = 0
        self._scroll_pending = False

    # -- reading ----------------------------------------------------------------------------

    def row(self, key: str) -> dict[str, Any] | None:
        return self._rows.get(str(key))

    @property
    def row_count(self) -> int:
        """Rows shown (after the filter)."""
        return len(self._view)

    @property
    def total_count(self) -> int:
        return len(self._rows)

    @property
    def keys(self) -> list[str]:
        """Every row's key, shown or filtered out, in natural order."""
        return list(self._seq)

    @property
    def keys_in_view_order(self) -> list[str]:
        return list(self._view)

    @property
    def sort_column(self) -> str | None:
        return self._sort_column

    @property
    def sort_reverse(self) -> bool:
        return self._sort_reverse

    @property
    def filter_text(self) -> str:
        return self._filter

    @property
    def cursor_key(self) -> str | None:
        return self._cursor_key

    @property
    def cursor_index(self) -> int:
        return self._cursor_index

    # -- data -------------------------------------------------------------------------------

    def set_rows(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Replace every row; the natural order is the order given."""
        for store in (self._rows, self._texts, self._haystacks, self._seq, self._sort_values):
            store.clear()
        self._cache.clear()
        self._widths = self._header_widths()
        for key, row in rows:
            key = str(key)
            if key not in self._seq:
                self._seq[key] = self._next_seq
                self._next_seq += 1
            self._store(key, row)
        self._rebuild()
        self._changed(structure=True, lines=(), grew=True)

    def set_columns(self, columns: Sequence[Column]) -> None:
        """Show these columns from now on (rows keep their data; each row's texts are made
        again, once). The sort stays if its column does; the filter is read again (and
        dropped if a column it names went)."""
        columns = tuple(columns)
        if columns == self.columns:
            return
        by_key = {c.key: c for c in columns}
        if len(by_key) != len(columns):
            raise ValueError("column keys must be unique")
        self.columns, self._column = columns, by_key
        if self._sort_column not in by_key:
            self._sort_column, self._sort_reverse = None, False
            self._sort_values.clear()
        self._widths = self._header_widths()
        self._haystacks.clear()
        for key, row in self._rows.items():
            self._store(key, row)
        try:
            self._terms, self._compares, self._needle, self._unknown = \
                self._parse_filter(self._filter)
        except FilterError:
            self._filter, self._needle, self._terms, self._compares = "", "", [], []
        self._rebuild()
        self._changed(structure=True, lines=(), grew=True)

    def apply(self, upsert: Sequence[tuple[str, dict[str, Any]]] = (),
              remove: Sequence[str] = (), order: Sequence[str] | None = None) -> None:
        """Apply one diff. Removes go first; new keys join the end of the natural order
        unless `order` (which replaces the natural order) places them."""
        out: set[str] = set()  # keys to take out of the view
        back: dict[str, None] = {}  # keys to put (back) where they now belong, if they match
        grew = False
        for key in map(str, remove):
            if key in self._rows:
                self._forget(key)
                out.add(key)
        for key, row in {str(k): r for k, r in upsert}.items():
            if key in self._rows:
                before = self._placement(key)
                self._discard_lines(key)
                grew |= self._store(key, row)
                if self._placement(key) != before:
                    out.add(key)
                    back[key] = None
            else:
                self._seq[key] = self._next_seq
                self._next_seq += 1
                grew |= self._store(key, row)
                back[key] = None
        if order is not None:
            self._reorder(order)
            self._rebuild()
        elif len(back) > RESORT_AT:
            self._rebuild()
        elif out or back:
            if out:
                self._view = [k for k in self._view if k not in out]
            for key in back:
                if self._matches(key):
                    insort(self._view, key, key=self._view_key)
        structure = order is not None or bool(out or back)
        self._changed(structure=structure, lines=[str(k) for k, _ in upsert], grew=grew)

    def _store(self, key: str, row: dict[str, Any]) -> bool:
        """Keep `row` under `key`; True when a fitted column had to grow."""
        self._rows[key] = row
        texts = [cell_text(row.get(c.key)) for c in self.columns]
        self._texts[key] = texts
        self._haystacks.pop(key, None)
        if self._sort_column is not None:
            self._sort_values[key] = self._sort_fn()(row.get(self._sort_column))
        grew = False
        for i, column in enumerate(self.columns):
            if column.width is None:
                text = texts[i]
                size = len(text) if text.isascii() else cell_len(text)
                cap = column.cap or MAX_FIT
                if size > self._widths[i] and self._widths[i] < cap:
                    self._widths[i] = min(size, cap)
                    grew = True
        return grew

    def _forget(self, key: str) -> None:
        for store in (self._rows, self._texts, self._haystacks, self._seq, self._sort_values):
            store.pop(key, None)
        self._discard_lines(key)

    def _reorder(self, order: Sequence[str]) -> None:
        """Natural order := the known keys of `order`, then the others as they were."""
        first = [k for k in dict.fromkeys(map(str, order)) if k in self._seq]
        placed = set(first)
        keys = first + [k for k in self._seq if k not in placed]
        self._seq = {k: i for i, k in enumerate(keys)}
        self._next_seq = len(keys)

    # -- view: filter and sort --------------------------------------------------------------

    def cycle_sort(self) -> None:
        """Sort by the next column (after the last one: the natural order), same direction."""
        keys: list[str | None] = [None, *(c.key for c in self.columns)]
        self.sort_by(keys[(keys.index(self._sort_column) + 1) % len(keys)], self._sort_reverse)

    def reverse_sort(self) -> None:
        self.sort_by(self._sort_column, not self._sort_reverse)

    def sort_by(self, column_key: str | None, reverse: bool = False) -> None:
        """Sort by a column (stable: ties keep the natural order); None: the natural order."""
        if column_key is not None and column_key not in self._column:
            raise KeyError(f"no column '{column_key}'")
        same = column_key == self._sort_column
        self._sort_column, self._sort_reverse = column_key, reverse
        if column_key is None:
            self._sort_values.clear()
        elif not same:
            fn = self._sort_fn()
            self._sort_values = {k: fn(r.get(column_key)) for k, r in self._rows.items()}
        self._rebuild()
        self._changed(structure=True, lines=(), grew=False)

    def set_filter(self, text: str) -> None:
        """Show only matching rows, case-insensitively; "" shows all. Every word must hold:
        `column:text` (column by key or title, e.g. `pool:gpu state:queued user:alice`) is
        in that column's cell; `column>number` (also <, <=, >=, =, !=; e.g. `lr>0.01
        loss<=1e-3`) compares the cell's value as a number (a cell that is no number does
        not match); the rest of the text must be in some cell of the row. A column may be
        named by the last part of a dotted title (`lr` for `optimizer.lr`) when only one has
        it. A comparison of a column with no number, or of a number with no column, is
        refused: the table keeps its filter, says why (`FilterRefused`, and a notification)
        and raises nothing. (A word such as `a=b` that is neither is text to find.)"""
        wanted = " ".join(text.split()).casefold()
        if wanted == self._filter:
            return
        try:
            terms, compares, plain, unknown = self._parse_filter(wanted)
        except FilterError as exc:
            self.post_message(self.FilterRefused(self, text, str(exc)))
            self.notify(str(exc), title="filter not applied", severity="error")
            return
        narrower = (bool(self._filter) and not terms and not self._terms and not compares
                    and not self._compares and self._needle in plain)
        self._filter, self._needle, self._terms = wanted, plain, terms
        self._compares, self._unknown = compares, unknown
        if narrower:  # every row that matches now matched before: filter the view, keep order
            self._view = [k for k in self._view if self._matches(k)]
        else:
            self._rebuild()
        self._changed(structure=True, lines=(), grew=False)

    @property
    def filter_unknown(self) -> list[str]:
        """Words of the filter shaped `name:text` or `name=text` whose name is no column's
        (searched for as text in every cell)."""
        return list(self._unknown)

    def column_named(self, name: str) -> int | None:
        """The index of the column `name` names (key or title, any case, or the last part
        of one dotted key or title: `lr` for `optimizer.lr`); None if none does. FilterError
        if several columns end so."""
        name = name.casefold()
        for i, c in enumerate(self.columns):
            if c.key.casefold() == name:
                return i
        for i, c in enumerate(self.columns):
            if c.label.casefold() == name:
                return i
        ends = [i for i, c in enumerate(self.columns)
                if name in (c.label.casefold().rpartition(".")[2],
                            c.key.casefold().rpartition(".")[2])]
        if len(ends) > 1:
            raise FilterError(f"'{name}' is the end of several columns: "
                              + ", ".join(self.columns[i].label for i in ends))
        return ends[0] if ends else None

    def _parse_filter(self, text: str) -> tuple[list[tuple[int, str]], list[Compare], str,
                                                  list[str]]:
        terms: list[tuple[int, str]] = []
        compares: list[Compare] = []
        rest: list[str] = []
        unknown: list[str] = []
        for word in text.split(" ") if text else ():
            name, colon, value = word.partition(":")
            found = _COMPARE.fullmatch(word) if not colon else None
            if found is not None and self._comparison(*found.groups()):
                compares.append(self._compare(word, *found.groups()))
            elif colon and value and name and (i := self.column_named(name)) is not None:
                terms.append((i, value))
            else:
                if (colon and value and name) or found is not None:
                    unknown.append(word)
                rest.append(word)
        return terms, compares, " ".join(rest).strip(), unknown

    def _comparison(self, name: str, op: str, value: str) -> bool:
        """Whether `name op value` is meant as a comparison: it names a column, or compares
        with a number (else, as `a=b` in a URL, it is text to find)."""
        if self.column_named(name) is not None:
            return True
        try:
            float(value)
        except ValueError:
            return False
        return True

    def _compare(self, word: str, name: str, op: str, value: str) -> Compare:
        i = self.column_named(name)
        if i is None:
            known = ", ".join(c.label for c in self.columns if c.label.strip())
            raise FilterError(f"'{word}': no column '{name}' (columns: {known})")
        try:
            number = float(value)
        except ValueError:
            raise FilterError(f"'{word}': '{value}' is not a number") from None
        if number != number:
            raise FilterError(f"'{word}': '{value}' is not a number")
        return i, _OPS[op], number

    def _number(self, key: str, index: int) -> float | None:
        """The cell's value as a number: the row's number itself (not its shown text), or
        its text read as one; None when it is neither."""
        value = self._rows[key].get(self.columns[index].key)
        if styled_pair(value):
            value = value[0]
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an int past a float's range compares as infinite
                return math.inf if value > 0 else -math.inf
        try:
            return float(self._texts[key][index])
        except ValueError:
            return None

    def _sort_fn(self) -> Callable[[Any], Any]:
        assert self._sort_column is not None
        return self._column[self._sort_column].sort_key or default_sort_key

    def _matches(self, key: str) -> bool:
        if not self._filter:
            return True
        if self._terms:
            texts = self._texts[key]
            if not all(value in texts[i].casefold() for i, value in self._terms):
                return False
        for i, op, number in self._compares:
            value = self._number(key, i)
            if value is None or not op(value, number):
                return False
        if not self._needle:
            return True
        haystack = self._haystacks.get(key)
        if haystack is None:
            haystack = self._haystacks[key] = "\0".join(self._texts[key]).casefold()
        return self._needle in haystack

    def _placement(self, key: str) -> tuple[bool, Any]:
        return self._matches(key), self._sort_values.get(key)

    def _view_key(self, key: str) -> Any:
        """Where `key` belongs in the view; the order `_rebuild` sorts into."""
        if self._sort_column is None:
            return self._seq[key]
        value = self._sort_values[key]
        return (Descending(value) if self._sort_reverse else value), self._seq[key]

    def _rebuild(self) -> None:
        keys = list(self._seq)
        if self._filter:
            keys = [k for k in keys if self._matches(k)]
        if self._sort_column is not None:  # stable, so ties stay in natural order either way
            keys.sort(key=self._sort_values.__getitem__, reverse=self._sort_reverse)
        self._view = keys

    def _arrange(self) -> None:
        """Share the width among the columns (see `columns.arrange`)."""
        room = self.scrollable_content_region.width if self.is_mounted else 0
        self._shown = arrange(self.columns, self._widths, room or None)
        hidden = tuple(self.hidden_columns)
        if room and hidden != self._arranged:
            self._arranged = hidden
            self.post_message(self.Arranged(self, list(hidden)))

    @property
    def hidden_columns(self) -> list[str]:
        """Keys of the columns left out for lack of width."""
        return [c.key for c, w in zip(self.columns, self._shown, strict=True) if not w]

    @property
    def shown_columns(self) -> list[str]:
        """Keys of the columns on screen (the narrower the table, the fewer)."""
        return [c.key for c, w in zip(self.columns, self._shown, strict=True) if w]

    def _changed(self, *, structure: bool, lines: Iterable[str], grew: bool) -> None:
        """Bring size, cursor and screen up to date after the data or the view changed."""
        if grew:
            self._arrange()
            self._cache.clear()
        self.virtual_size = Size(self._total_width(), len(self._view) + 1)
        if structure:
            self._follow_cursor()
        if structure or grew:
            self.refresh()
            return
        top, rows = int(self.scroll_y), self._visible_rows()
        changed = set(lines)
        for index, key in enumerate(self._view[top:top + rows], start=top):
            if key in changed:
                self.refresh_line(index + 1)

    # -- cursor -----------------------------------------------------------------------------

    def move_cursor_to_key(self, key: str) -> None:
        """Put the cursor on `key` and scroll it into view (no-op if the row is not shown)."""
        try:
            index = self._view.index(str(key))
        except ValueError:
            return
        self._move(index, scroll=True)

    def _follow_cursor(self) -> None:
        """After the view changed: keep the cursor on its key, or where it was if that went."""
        key, index = self._cursor_key, self._cursor_index
        if key is not None and not (index < len(self._view) and self._view[index] == key):
            with suppress(ValueError):
                index = self._view.index(key)
        self._move(index, scroll=False)

    def _move(self, index: int, *, scroll: bool) -> None:
        index = max(0, min(index, len(self._view) - 1))
        key = self._view[index] if self._view else None
        old_index, moved = self._cursor_index, key != self._cursor_key
        self._cursor_index, self._cursor_key = index, key
        if scroll:
            self._scroll_to_cursor()
        if index != old_index or moved:
            for i in (old_index, index):
                if int(self.scroll_y) <= i < int(self.scroll_y) + self._visible_rows():
                    self.refresh_line(i + 1)
        if moved:
            self.post_message(self.CursorMoved(self, key))

    def _visible_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _scroll_to_cursor(self) -> None:
        if not self.is_mounted or self.scrollable_content_region.height < 2:
            self._scroll_pending = True  # not laid out yet: scroll on the first resize
            return
        self._scroll_pending = False
        top, rows, index = int(self.scroll_y), self._visible_rows(), self._cursor_index
        if index < top:
            self.scroll_to(y=index, animate=False)
        elif index >= top + rows:
            self.scroll_to(y=index - rows + 1, animate=False)

    def action_cursor_up(self) -> None:
        self._move(self._cursor_index - 1, scroll=True)

    def action_cursor_down(self) -> None:
        self._move(self._cursor_index + 1, scroll=True)

    def action_page_up(self) -> None:
        self._move(self._cursor_index - self._visible_rows(), scroll=True)

    def action_page_down(self) -> None:
        self._move(self._cursor_index + self._visible_rows(), scroll=True)

    def action_first(self) -> None:
        self._move(0, scroll=True)

    def action_last(self) -> None:
        self._move(len(self._view) - 1, scroll=True)

    def action_select(self) -> None:
        if self._cursor_key is not None:
            self.post_message(self.Selected(self, self._cursor_key))

    def on_click(self, event: events.Click) -> None:
        """A click on a row moves the cursor there (double click: Selected); a click on a
        header sorts by that column, then reverses, then goes back to the natural order."""
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            column = self._column_at(offset.x + int(self.scroll_x))
            if column is not None:
                if column != self._sort_column:
                    self.sort_by(column)
                elif not self._sort_reverse:
                    self.sort_by(column, reverse=True)
                else:
                    self.sort_by(None)
            return
        index = int(self.scroll_y) + offset.y - 1
        if 0 <= index < len(self._view):
            self._move(index, scroll=True)
            if event.chain > 1:
                self.action_select()

    def _column_at(self, x: int) -> str | None:
        for column, width in self._visible():
            if x < width:
                return column.key
            x -= width + GAP
            if x < 0:
                return None
        return None

    # -- rendering --------------------------------------------------------------------------

    def _header_widths(self) -> list[int]:
        return [c.width if c.width is not None else max(cell_len(c.label), MIN_WIDTH)
                for c in self.columns]

    def _visible(self) -> list[tuple[Column, int]]:
        return [(c, w) for c, w in zip(self.columns, self._shown, strict=True) if w]

    def _total_width(self) -> int:
        shown = [w for w in self._shown if w]
        return sum(shown) + GAP * max(len(shown) - 1, 0)

    def _discard_lines(self, key: str) -> None:
        width = self.size.width
        for variant in (_EVEN, _ODD, _CURSOR):
            self._cache.discard((key, width, variant))

    def header_text(self) -> str:
        """The header line's text: labels, with ▲ or ▼ on the sorted column."""
        cells = []
        for column, width in self._visible():
            label = column.label
            if column.key == self._sort_column:
                arrow = "▼" if self._sort_reverse else "▲"
                label = f"{label} {arrow}" if cell_len(label) + 2 <= width else \
                    (fit(label, width - 2, "left") + " " if width > 2 else "") + arrow
            cells.append(fit(label, width, column.align))
        return (" " * GAP).join(cells)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        full = max(width, self._total_width())
        if y == 0:
            style = self.get_component_rich_style("rowtable--header")
            line = Strip([Segment(fit(self.header_text(), full, "left"), style)], full)
        else:
            index = scroll_y + y - 1
            if index >= len(self._view):
                return Strip.blank(width, self.rich_style)
            line = self._row_strip(index, width, full)
        return line.crop_extend(scroll_x, scroll_x + width, self.rich_style)

    def _row_strip(self, index: int, width: int, full: int) -> Strip:
        key = self._view[index]
        variant = _CURSOR if index == self._cursor_index and self.has_focus else index % 2
        strip = self._cache.get((key, width, variant))
        if strip is None:
            if variant == _CURSOR:
                style = self.get_component_rich_style("rowtable--cursor")
            elif variant == _ODD:
                style = self.get_component_rich_style("rowtable--odd")
            else:
                style = self.rich_style
            strip = Strip(self._segments(key, style, full), full)
            self._cache.set((key, width, variant), strip)
        return strip

    def _segments(self, key: str, style: Style, full: int) -> list[Segment]:
        """The row as segments `full` cells wide: one segment unless a cell carries a style."""
        row, texts = self._rows[key], self._texts[key]
        segments: list[Segment] = []
        plain: list[str] = []
        first = True
        for i, (column, width) in enumerate(zip(self.columns, self._shown, strict=True)):
            if not width:
                continue
            if not first:
                plain.append(" " * GAP)
            first = False
            value = row.get(column.key)
            if isinstance(value, Text) or styled_pair(value):
                if plain:
                    segments.append(Segment("".join(plain), style))
                    plain = []
                segments.extend(self._styled_cell(value, width, column.align, style))
            else:
                plain.append(fit(texts[i], width, column.align))
        plain.append(" " * (full - self._total_width()))
        segments.append(Segment("".join(plain), style))
        return segments

    def _styled_cell(self, value: Any, width: int, align: str, base: Style) -> list[Segment]:
        if isinstance(value, Text):
            text = value.copy()
        else:
            text = Text(cell_text(value[0]), style=value[1])
        if not text.plain.isprintable():  # same length, so the spans stay where they were
            text.plain = "".join(c if c.isprintable() else " " for c in text.plain)
        text.truncate(width, overflow="ellipsis")
        text.align("right" if align == "right" else "left", width)
        console = self.app.console
        if text.style:  # render() applies a Text's own style only through its spans
            base = base + console.get_style(text.style, default=Style.null())
        return list(Segment.apply_style(text.render(console, end=""), base))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def watch_show_vertical_scrollbar(self) -> None:
        """Rows came (or went) so that a scrollbar shows (or no longer does): the columns
        share the width left beside it, so none is cut at the edge without its `…`."""
        if self.is_mounted:
            self.on_resize()
            self.refresh()

    def on_resize(self) -> None:
        self._arrange()
        self.virtual_size = Size(self._total_width(), len(self._view) + 1)
        self._cache.clear()
        if self._scroll_pending:
            self._scroll_to_cursor()
