"""Text from trials made safe for a terminal: control characters shown, never obeyed.

A trial's log line is written by the trial, so anyone who can run one can put bytes on the
screen of whoever reads its logs: an OSC sequence sets the terminal's title or clipboard, a CSI
clears the screen or moves the cursor over earlier lines, a carriage return or a bidi override
makes a line read as something else. Every such character reaches the terminal visibly
escaped, as Python writes it (`\\x1b`, `\\x9b`, `\\u202e`): ESC, the rest of C0 but tab and
newline, DEL, C1 (U+0080-U+009F), the bidi controls, line and paragraph separators and lone
surrogates (undecodable bytes). A line ending CR LF, or CR, ends as a plain line.

Colour is the one thing a line may change: its SGR sequences (`ESC [ digits ; ... m`, nothing
else) are dropped, or, for a terminal, kept for `rich.text.Text.from_ansi` to turn into styles
(`log_text`); Rich's own decoder is not trusted alone, as it passes C1 controls, BEL-ended OSC
payloads and stray escapes through as text. This module is pure: the CLI's log output
(`dettui trial logs`, `experiment create --follow`) and the dashboard's log view both use it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

SGR = re.compile(r"\x1b\[[0-9;]{0,64}m")
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2028\u2029"
                    "\u2066-\u2069\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape(text: str) -> str:
    """`text` with every unsafe character written out (`\\x1b`); tabs and newlines kept. A
    printable text (most log lines) is returned as it is, checked once."""
    if text.isprintable():
        return text
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if text.endswith("\r"):
            text = text[:-1]
    return UNSAFE.sub(_shown, text)


def safe_line(text: str, *, colour: bool = False) -> str:
    """A log line for a terminal: SGR colour sequences dropped (kept if `colour`, for
    `Text.from_ansi` only), everything else `escape`d."""
    if text.isprintable():
        return text
    if "\x1b[" not in text:
        return escape(text)
    parts = SGR.split(text)
    if not colour:
        return "".join(escape(p) for p in parts)
    sgrs = SGR.findall(text)
    out = [escape(parts[0])]
    for sgr, part in zip(sgrs, parts[1:], strict=True):
        out += (sgr, escape(part))
    return "".join(out)


def log_text(text: str) -> Text:
    """A log line as a rich Text in colour: its SGR sequences as styles, nothing else obeyed."""
    from rich.text import Text

    return Text.from_ansi(safe_line(text, colour=True), end="")
