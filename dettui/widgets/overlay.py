"""A chart widget for the compare screen: it shows what a layout function of `plot` draws at
the widget's size (curves overlaid, a scatter, parallel coordinates), laid out again only when
its size or its data changes. What the layout left out is in `notes`, for the screen to say."""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from dettui.widgets.plot import Drawn, message

Layout = Callable[[int, int], Drawn]  # (width, height) in cells -> the rows to show


class Figure(Widget):
    """Shows `layout(width, height)`; `show()` gives it a new layout (or a message)."""

    DEFAULT_CSS = """
    Figure { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.layout_fn: Layout = lambda w, h: message(w, h, "")
        self._drawn: tuple[Size, Drawn] | None = None
        self._strips: tuple[Drawn, dict[int, Strip]] | None = None
        self.draws = 0  # layouts computed, for the tests

    def show(self, layout: Layout) -> None:
        self.layout_fn = layout
        self._drawn = None
        self.refresh()

    def say(self, text: str) -> None:
        """Nothing to draw: why, in the middle of the chart."""
        self.show(lambda w, h: message(w, h, text))

    def drawn(self) -> Drawn:
        """What is shown at the widget's size now (laid out once per size and data)."""
        size = self.content_size
        if self._drawn is None or self._drawn[0] != size:
            self.draws += 1
            self._drawn = (size, self.layout_fn(max(size.width, 1), max(size.height, 1)))
        return self._drawn[1]

    @property
    def notes(self) -> list[str]:
        return self.drawn().notes

    def render_line(self, y: int) -> Strip:
        """One row of the chart, as segments of its spans (no Rich layout of a whole Text:
        a 200x50 chart of 100 curves is thousands of spans)."""
        drawn = self.drawn()
        width = self.content_size.width
        if self._strips is None or self._strips[0] is not drawn:
            self._strips = (drawn, {})
        cache = self._strips[1]
        if y not in cache:
            row = drawn.rows[y] if y < len(drawn.rows) else Text()
            cache[y] = Strip(_segments(row)).crop_extend(0, width, self.rich_style)
        return cache[y]


def _segments(text: Text) -> list[Segment]:
    """A one-line Text's segments: its plain text cut at its (non-overlapping) spans."""
    plain, base = text.plain, text.style if isinstance(text.style, Style) else Style()
    out, at = [], 0
    for span in sorted(text.spans, key=lambda s: s.start):
        if span.start > at:
            out.append(Segment(plain[at:span.start], base))
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        out.append(Segment(plain[span.start:span.end], base + style))
        at = max(at, span.end)
    if at < len(plain):
        out.append(Segment(plain[at:], base))
    return out
