"""Text from users and trials made safe to show: never markup, never a terminal control sequence.

Experiment names, labels, log lines, config values, error messages, file names and search terms
all reach the screen through `plain()` (a `rich.text.Text`, which no widget parses as markup)
or `clean()` (a str with escape sequences removed and other control characters replaced, and
lone surrogates from undecodable bytes replaced, so the terminal gets only printable text);
text boxes are `PlainInput`s, whose value is always `clean`.
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.widgets import Input, Static

# CSI (colours, cursor moves), OSC (titles, hyperlinks) and other two-byte escapes.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
                     r"|\x9b[0-?]*[ -/]*[@-~]")
# and bidi controls (U+202E shows "evil\u202eexe.txt" as "eviltxt.exe"), line separators
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_CONTROL = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")
REPLACEMENT = "\ufffd"


def clean(value: object, *, newlines: bool = False) -> str:
    """`value` as printable text: escape sequences dropped, tabs as spaces, other control
    characters (newlines too, unless `newlines`) and lone surrogates shown as �."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    text = _ESCAPE.sub("", text).replace("\t", "    ")
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub(REPLACEMENT, text)


def plain(*parts: object, newlines: bool = False) -> Text:
    """The parts joined as plain text: what a Static or Label shows, markup never parsed."""
    return Text("".join(clean(p, newlines=newlines) for p in parts), end="")


def plain_lines(*parts: object) -> Text:
    """`plain` of the parts, where a part that starts with a newline starts a line of its own
    (the caller's line break, as a header's warning line); a newline anywhere else, as in
    user text, is still shown as �."""
    texts = [str(p) for p in parts]
    return Text("".join(("\n" + clean(t[1:])) if t.startswith("\n") else clean(t)
                        for t in texts), end="")


class Plain(Static):
    """A Static that shows text as it is: strings are never parsed as markup and lose their
    control characters (`plain`), whatever a screen passes in."""

    def __init__(self, content: object = "", *, newlines: bool = False, **kw: Any) -> None:
        self.newlines = newlines
        super().__init__(self._text(content), markup=False, **kw)

    def _text(self, content: object) -> Any:
        return plain(content, newlines=self.newlines) if isinstance(content, str) else content

    def update(self, content: Any = "", *, layout: bool = True) -> None:
        super().update(self._text(content), layout=layout)


class PlainInput(Input):
    """An Input whose text is printable: an escape sequence or control character typed, pasted
    or put in as a value (a pool's name, a picked file's) never reaches the terminal (Textual
    writes an Input's text to it as it is)."""

    def validate_value(self, value: str) -> str:
        return clean(value)
