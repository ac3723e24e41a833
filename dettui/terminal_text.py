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
(`dettui trial logs`, `experiment create --follow`) and the dashboard's log view both use it,
and so does every error line the CLI prints (`message`).

Writing to a terminal that is gone: under `dettui serve 2>&1 | cat`, Ctrl-C ends `cat` too, and
every later write to stdout or stderr raises BrokenPipeError (Python ignores SIGPIPE). `say`
and `StderrHandler` (the CLI's logging) never fail: a broken stream is pointed at /dev/null,
so that what follows (a master's drain on that Ctrl-C, Python's flush at exit) goes on.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import TYPE_CHECKING, Any

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


ERROR_CHARS = 4000  # of an error message the CLI prints: a hostile master's text is capped


def message(text: str, cap: int = ERROR_CHARS) -> str:
    """An error message or note for the terminal: every unsafe character escaped (a URL, a
    Content-Type, a master's error text may carry any), capped at `cap` characters."""
    text = escape(text)
    return text if len(text) <= cap else text[:cap - 1] + "…"


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


def silence(stream: Any) -> None:
    """Point a broken standard stream (its reader gone) at /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):
        pass


def say(line: str, stream: Any = None) -> None:
    """`line` on stderr (or `stream`), flushed; a broken stream is silenced, never raised."""
    stream = stream or sys.stderr
    try:
        print(line, file=stream, flush=True)
    except OSError:
        silence(stream)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """logging's stream handler, which silences a broken stream instead of printing a
    "Logging error" traceback per record (to that same broken stream)."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if isinstance(sys.exc_info()[1], OSError):
            silence(self.stream)
            return
        super().handleError(record)
