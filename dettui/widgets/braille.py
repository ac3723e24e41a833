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
_BIT_BY_DOT = [BITS[r][c] for r in range(4) for c in range(2)]  # index: row * 2 + col
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
        """A polyline through the points (in dots), each segment drawn dot by dot."""
        ink = self._ink(colour)
        dots, inks, w, h = self.dots, self.ink, self.width, self.height
        xmax, ymax = 2 * w - 1, 4 * h - 1
        bit = _BIT_BY_DOT
        px, py = None, None
        for x, y in zip(xs, ys, strict=True):
            if px is None or py is None:
                px, py = x, y
            steps = int(max(abs(x - px), abs(y - py))) + 1
            dx, dy = (x - px) / steps, (y - py) / steps
            for i in range(1, steps + 1) if (px, py) != (x, y) else (0,):
                ix, iy = round(px + dx * i), round(py + dy * i)
                if 0 <= ix <= xmax and 0 <= iy <= ymax:
                    cell = (iy >> 2) * w + (ix >> 1)
                    dots[cell] |= bit[((iy & 3) << 1) | (ix & 1)]
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
