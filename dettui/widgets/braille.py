"""A braille canvas: each text cell holds 2 x 4 dots (U+2800 plus a bit per dot), so a chart
of W x H cells draws lines at 2W x 4H dots. A cell takes the colour of the last line that set a
dot in it; a marker (a character of its own, e.g. a scatter's point) covers the cell. Pure: no
widgets, only Rich's Text for the rows."""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Text

BLANK = 0x2800
# The bit of each dot, by its row (0-3) and column (0-1) in the cell.
BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
# Per dot column (0-1) in the cell, the bits of its dots from row a to row b (a <= b).
_MASKS = [[[sum(BITS[r][c] for r in range(a, b + 1)) for b in range(4)] for a in range(4)]
          for c in range(2)]
MAX_CELLS = 1_000_000  # a canvas is at most this many cells (1000 x 1000)


class Canvas:
    """`width` x `height` cells. Coordinates are in dots: x from 0 (left) to 2*width - 1, y from
    0 (top) to 4*height - 1; points outside are clipped."""

    def __init__(self, width: int, height: int) -> None:
        if width < 1 or height < 1 or width * height > MAX_CELLS:
            raise ValueError(f"canvas of {width}x{height} cells: must be 1..{MAX_CELLS} cells")
        self.width, self.height = width, height
        self.dots = bytearray(width * height)
        self.ink = [0] * (width * height)  # per cell: 1 + the index of its colour, 0 none
        self.colours: list[str] = []
        self.marks: dict[int, tuple[str, int]] = {}  # cell -> (character, colour index + 1)

    def _ink(self, colour: str) -> int:
        if colour not in self.colours:
            self.colours.append(colour)
        return self.colours.index(colour) + 1

    def line(self, xs: Sequence[float], ys: Sequence[float], colour: str) -> None:
        """A polyline through the points (in dots). Each segment is drawn a dot column at a
        time: in each column it crosses, the dots from where it enters to where it leaves,
        set a cell (up to 4 dots) at a time, so a steep segment costs its cells, not its
        dots, and no line has gaps."""
        ink = self._ink(colour)
        w, xmax, ymax = self.width, 2 * self.width - 1, 4 * self.height - 1
        dots, inks = self.dots, self.ink
        px = py = 0.0
        first = True
        for x, y in zip(xs, ys, strict=True):
            if first:
                px, py, first = x, y, False
            left, right = (px, x) if px <= x else (x, px)
            c0, c1 = round(left), round(right)
            if c1 < 0 or c0 > xmax:
                px, py = x, y
                continue
            slope = (y - py) / (x - px) if c0 != c1 else 0.0
            for c in range(c0 if c0 > 0 else 0, (c1 if c1 < xmax else xmax) + 1):
                if c0 == c1:
                    ya, yb = py, y
                else:
                    ya = py + slope * ((c - 0.5 if c - 0.5 > left else left) - px)
                    yb = py + slope * ((c + 0.5 if c + 0.5 < right else right) - px)
                top, bottom = (round(ya), round(yb)) if ya <= yb else (round(yb), round(ya))
                if bottom < 0 or top > ymax:
                    continue
                if top < 0:
                    top = 0
                if bottom > ymax:
                    bottom = ymax
                masks, cx = _MASKS[c & 1], c >> 1
                r0, r1 = top >> 2, bottom >> 2
                if r0 == r1:
                    cell = r0 * w + cx
                    dots[cell] |= masks[top & 3][bottom & 3]
                    inks[cell] = ink
                    continue
                for r in range(r0, r1 + 1):
                    cell = r * w + cx
                    dots[cell] |= masks[top & 3 if r == r0 else 0][bottom & 3 if r == r1 else 3]
                    inks[cell] = ink
            px, py = x, y

    def mark(self, col: int, row: int, char: str, colour: str) -> None:
        """A character of its own in a cell (a scatter's point, an axis line)."""
        if 0 <= col < self.width and 0 <= row < self.height:
            self.marks[row * self.width + col] = (char, self._ink(colour))

    def rows(self) -> list[Text]:
        """The canvas as text, one Text per row, each run of one colour one span."""
        styles = [Style(), *(Style(color=c) for c in self.colours)]
        out = []
        w = self.width
        for r in range(self.height):
            text = Text(end="")
            run: list[str] = []
            run_ink = 0
            for cell in range(r * w, r * w + w):
                mark = self.marks.get(cell)
                if mark is not None:
                    char, ink = mark
                elif self.dots[cell]:
                    char, ink = chr(BLANK + self.dots[cell]), self.ink[cell]
                else:
                    char, ink = " ", 0
                if ink != run_ink and run:
                    text.append("".join(run), styles[run_ink])
                    run = []
                run_ink = ink
                run.append(char)
            if run:
                text.append("".join(run), styles[run_ink])
            out.append(text)
        return out
