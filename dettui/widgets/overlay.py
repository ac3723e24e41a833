"""A chart widget for the compare screen: it shows what a layout function of `plot` draws at
the widget's size (curves overlaid, a scatter, parallel coordinates), laid out again only when
its size or its data changes. What the layout left out is in `notes`, for the screen to say."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.geometry import Size
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

    def render(self) -> Text:
        return Text("\n", end="").join(self.drawn().rows)
