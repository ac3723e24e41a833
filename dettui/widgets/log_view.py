"""A log viewer that renders only the rows on screen: each line behind a two-cell gutter (its
level letter E/W/I/D and `!` for stderr, coloured), its text coloured by level, matches of a
search highlighted; lines cut (scroll sideways, a column or a page at a time) or wrapped.

Text is shown as text, never as markup. Lines can be added at either end and dropped from
either end; what is on screen stays where it is (a reader scrolled up is not moved)."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from typing import ClassVar

from rich.cells import cell_len, chop_cells
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip

from dettui.log_entry import LogEntry

GUTTER = 2
MAX_WIDTH = 20_000  # cells: a longer line is scrolled to its 20,000th cell, no further
EDGE = 2  # rows from the top or bottom of what is held at which more is asked for
WIDE = 120  # columns from which a line's full prefix (date, time, container, rank) is shown
MARKS = {"E": "error", "W": "warning", "I": "info", "D": "debug"}


class LogView(ScrollView, can_focus=True):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "log-view--error", "log-view--warning", "log-view--info", "log-view--debug",
        "log-view--stderr", "log-view--match", "log-view--current", "log-view--prefix"}
    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; overflow: scroll; }
    LogView > .log-view--error { color: $error; }
    LogView > .log-view--warning { color: $warning; }
    LogView > .log-view--info { color: $success; }
    LogView > .log-view--debug { color: $text-muted; }
    LogView > .log-view--stderr { color: $accent; text-style: bold; }
    LogView > .log-view--match { background: $warning 60%; color: $text; }
    LogView > .log-view--current { background: $boost; }
    LogView > .log-view--prefix { color: $text-muted; }
    """
    wrap: reactive[bool] = reactive(False)

    class NearEdge(Message):
        """The reader is within a few rows of the first (`top`) or last line held."""

        def __init__(self, top: bool) -> None:
            super().__init__()
            self.top = top

    class Jumped(Message):
        """Home (`top`) or End was pressed: the reader asks for the log's start or end, which
        may lie beyond the lines held."""

        def __init__(self, top: bool) -> None:
            super().__init__()
            self.top = top

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries: list[LogEntry] = []
        self.pattern: re.Pattern[str] | None = None
        self.current = -1  # the line a search or jump went to (marked)
        self._widest = 0
        self._long = False  # the prefix shown is the long one
        self._starts: list[int] | None = None  # first row of each line when wrapped
        self._cache: LRUCache[tuple[int, int], tuple[Strip, Strip, int]] = LRUCache(1024)

    # what a caller reads

    @property
    def lines(self) -> list[str]:
        """Each line as shown: its prefix (time, rank) and text."""
        return [self._prefix(e) + e.text for e in self.entries]

    @property
    def long_prefix(self) -> bool:
        """The full prefix (date, time, container, rank) or the short one (time, rank)."""
        return self.size.width >= WIDE

    @property
    def line_count(self) -> int:
        return len(self.entries)

    @property
    def at_end(self) -> bool:
        return self.scroll_y >= self.max_scroll_y

    @property
    def text_width(self) -> int:
        return max(1, self.scrollable_content_region.width - GUTTER)

    # what a caller changes

    def replace(self, entries: Sequence[LogEntry]) -> None:
        self.entries = list(entries)
        self.current = -1
        self._widest = _widest(self.entries, self._long)
        self._changed()

    def extend(self, entries: Sequence[LogEntry], *, follow: bool = True) -> None:
        """Lines after the last: at the end and following, the view stays at the end; else
        it stays put."""
        if not entries:
            return
        follow = follow and self.at_end
        self.entries.extend(entries)
        self._widest = max(self._widest, _widest(entries, self._long))
        if self._starts is not None:  # wrapped: only the new lines' rows are counted
            _extended(self._starts, entries, self.text_width, self._long)
        self._changed(rows_known=self._starts is not None)
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def prepend(self, entries: Sequence[LogEntry]) -> None:
        """Lines before the first; what is on screen stays on screen."""
        if not entries:
            return
        before = self.rows
        self.entries[:0] = entries
        self.current += len(entries) if self.current >= 0 else 0
        self._widest = max(self._widest, _widest(entries, self._long))
        self._changed()
        self.scroll_to(y=self.scroll_y + self.rows - before, animate=False, immediate=True)

    def drop_front(self, count: int) -> None:
        if count <= 0:
            return
        before = self.rows
        del self.entries[:count]
        self.current = max(-1, self.current - count)
        self._changed()
        self.scroll_to(y=max(0, self.scroll_y - (before - self.rows)), animate=False,
                       immediate=True)

    def drop_back(self, count: int) -> None:
        if count > 0:
            del self.entries[-count:]
            self.current = min(self.current, len(self.entries) - 1)
            self._changed()

    def highlight(self, pattern: re.Pattern[str] | None) -> None:
        self.pattern = pattern
        self._cache.clear()
        self.refresh()

    def go_to(self, index: int) -> None:
        """Mark line `index` and bring it on screen, three rows below the top."""
        self.current = index
        self._cache.clear()
        self.scroll_to(y=max(0, self.row_of(index) - 3), animate=False, immediate=True)
        self.refresh()

    def page_sideways(self, pages: int) -> None:
        self.scroll_to(x=max(0, self.scroll_x + pages * max(1, self.text_width - 4)),
                       animate=False)

    # rows

    @property
    def rows(self) -> int:
        starts = self._row_starts()
        return len(self.entries) if starts is None else starts[-1]

    def row_of(self, index: int) -> int:
        starts = self._row_starts()
        return index if starts is None else starts[min(index, len(starts) - 1)]

    def _row_starts(self) -> list[int] | None:
        if not self.wrap:
            return None
        if self._starts is None:
            self._starts = _extended([0], self.entries, self.text_width, self._long)
        return self._starts

    def _changed(self, *, rows_known: bool = False) -> None:
        if not rows_known:
            self._starts = None
        self._cache.clear()
        self.virtual_size = Size(GUTTER + (0 if self.wrap else min(self._widest, MAX_WIDTH)),
                                 self.rows)
        self.refresh()

    def watch_wrap(self, old: bool, new: bool) -> None:
        """The same line stays at the top (its row counted as it was before the change)."""
        row = round(self.scroll_y)
        if old:
            starts = self._starts or _extended([0], self.entries, self.text_width, self._long)
            index = max(0, bisect_right(starts, row) - 1)
        else:
            index = row
        self._changed()
        self.scroll_to(x=0, y=self.row_of(index), animate=False, immediate=True)

    def on_resize(self) -> None:
        index = self._top_index()
        if self.long_prefix != self._long:
            self._long = self.long_prefix
            self._widest = _widest(self.entries, self._long)
        elif not self.wrap:
            return
        self._changed()
        self.scroll_to(y=self.row_of(index), animate=False, immediate=True)

    def _prefix(self, entry: LogEntry) -> str:
        return entry.stamp if self._long else entry.short

    def _top_index(self) -> int:
        starts = self._starts if self.wrap else None
        row = round(self.scroll_y)
        return row if starts is None else max(0, bisect_right(starts, row) - 1)

    def action_scroll_home(self) -> None:
        self.post_message(self.Jumped(top=True))

    def action_scroll_end(self) -> None:
        self.post_message(self.Jumped(top=False))

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new < old and new <= EDGE:
            self.post_message(self.NearEdge(top=True))
        elif new > old and new >= self.max_scroll_y - EDGE:
            self.post_message(self.NearEdge(top=False))

    # drawing

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        row = scroll_y + y
        starts = self._row_starts()
        if starts is None:
            index, part = row, 0
        else:
            index = bisect_right(starts, row) - 1
            part = row - starts[index] if 0 <= index < len(self.entries) else 0
        if not 0 <= index < len(self.entries):
            return Strip.blank(width, self.rich_style)
        gutter, text, first = self._strip(index, part)
        shift = 0 if starts is not None else scroll_x
        body = text.crop_extend(shift, shift + width - GUTTER, self.rich_style)
        return Strip.join([gutter, _offsets(body, first + shift, index)])

    def _strip(self, index: int, part: int) -> tuple[Strip, Strip, int]:
        """The gutter and the text of one row (a line, or a part of a wrapped one), and the
        index in the line of the row's first character."""
        key = (index, part)
        selection = self.text_selection
        if selection is None and (cached := self._cache.get(key)) is not None:
            return cached
        entry = self.entries[index]
        base = self.rich_style
        prefix = self._prefix(entry)
        text = Text(prefix + entry.text, style=base, no_wrap=True, end="")
        if prefix:
            text.stylize(self._style("prefix"), 0, len(prefix))
        if entry.level in ("E", "W", "D"):
            text.stylize(self._style(MARKS[entry.level]), len(prefix))
        if self.pattern is not None:
            for found in self.pattern.finditer(entry.text):
                if found.end() > found.start():
                    text.stylize(self._style("match"), len(prefix) + found.start(),
                                 len(prefix) + found.end())
        if index == self.current:
            text.stylize(self._style("current"))
        if selection is not None and (span := selection.get_span(index)) is not None:
            end = len(text) if span[1] == -1 else span[1]
            text.stylize(self.screen.get_component_rich_style("screen--selection"), span[0], end)
        first = 0
        if self.wrap:
            text, first = self._part(text, part)
        gutter = [Segment(entry.level or " ", base + self._style(MARKS[entry.level])
                          if entry.level else base),
                  Segment("!" if entry.stderr else " ", base + self._style("stderr"))]
        strips = Strip(gutter, GUTTER), Strip(text.render(self.app.console)), first
        if selection is None:
            self._cache[key] = strips
        return strips

    def _part(self, text: Text, part: int) -> tuple[Text, int]:
        """Row `part` of a wrapped line, and the index of its first character."""
        starts = _breaks(text.plain, self.text_width)
        if part >= len(starts):
            return text[len(text):], len(text)
        end = starts[part + 1] if part + 1 < len(starts) else len(text)
        return text[starts[part]:end], starts[part]

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The text of the lines selected with the mouse (a line is its index; a character,
        its index in the line)."""
        return selection.extract("\n".join(self.lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self._cache.clear()
        self.refresh()

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"log-view--{name}", partial=True)


def _offsets(strip: Strip, first: int, line: int) -> Strip:
    """`strip` with each segment marked with where its first character is in the log (line,
    character), which a mouse selection reads. Wide characters are counted as cells."""
    segments, at = [], first
    for text, style, control in strip:
        segments.append(Segment(text, (style or Style()) + Style.from_meta(
            {"offset": (at, line)}), control))
        at += len(text)
    return Strip(segments, strip.cell_length)


def _widest(entries: Sequence[LogEntry], long: bool) -> int:
    return max((_cells((e.stamp if long else e.short) + e.text) for e in entries), default=0)


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _extended(starts: list[int], entries: Sequence[LogEntry], width: int,
              long: bool) -> list[int]:
    """`starts` (the first row of each line, and the row after the last) with `entries`
    wrapped at `width` cells added."""
    total = starts[-1]
    for e in entries:
        text = (e.stamp if long else e.short) + e.text
        total += 1 if _cells(text) <= width else len(_breaks(text, width))
        starts.append(total)
    return starts


def _breaks(text: str, width: int) -> list[int]:
    """Where each row of `text` wrapped at `width` cells starts: after the last space that
    fits (a word is cut only when longer than a row)."""
    starts, start = [0], 0
    if not text.isascii():  # wide characters: cut at cells
        for piece in chop_cells(text, width)[:-1]:
            start += len(piece)
            starts.append(start)
        return starts
    while len(text) - start > width:
        space = text.rfind(" ", start + 1, start + width + 1)
        start = space + 1 if space > start else start + width
        starts.append(start)
    return starts
