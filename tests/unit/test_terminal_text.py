"""Log text for terminals (dettui.terminal_text): every control character shown escaped, never
obeyed; colour kept only as SGR for Rich's decoder."""

from __future__ import annotations

import pytest

from dettui.terminal_text import escape, log_text, safe_line

CASES = [  # (a trial's line, as shown without colour, as handed to Text.from_ansi)
    ("plain text", "plain text", "plain text"),
    ("tab\tand newline\n", "tab\tand newline\n", "tab\tand newline\n"),
    ("\x1b]0;pwned\x07title", "\\x1b]0;pwned\\x07title", "\\x1b]0;pwned\\x07title"),
    ("\x1b]52;c;ZXZpbA==\x1b\\", "\\x1b]52;c;ZXZpbA==\\x1b\\", "\\x1b]52;c;ZXZpbA==\\x1b\\"),
    ("a\x1b[2Jb\x1b[H", "a\\x1b[2Jb\\x1b[H", "a\\x1b[2Jb\\x1b[H"),
    ("\x1b[31mred\x1b[0m", "red", "\x1b[31mred\x1b[0m"),
    ("\x1b[1;38;5;196mbold\x1b[m", "bold", "\x1b[1;38;5;196mbold\x1b[m"),
    ("\x1b[38:5:1mcolon", "\\x1b[38:5:1mcolon", "\\x1b[38:5:1mcolon"),
    ("\x1b[?1049h alt screen", "\\x1b[?1049h alt screen", "\\x1b[?1049h alt screen"),
    ("\x9b2J C1 CSI \x9d0;t\x9c", "\\x9b2J C1 CSI \\x9d0;t\\x9c", "\\x9b2J C1 CSI \\x9d0;t\\x9c"),
    ("\x85next line \x80", "\\x85next line \\x80", "\\x85next line \\x80"),
    ("nul\x00 bel\x07 bs\x08 vt\x0b ff\x0c del\x7f", "nul\\x00 bel\\x07 bs\\x08 vt\\x0b "
     "ff\\x0c del\\x7f", "nul\\x00 bel\\x07 bs\\x08 vt\\x0b ff\\x0c del\\x7f"),
    ("safe\rEVIL", "safe\\x0dEVIL", "safe\\x0dEVIL"),
    ("windows line\r\n", "windows line\n", "windows line\n"),
    ("progress 10%\r", "progress 10%", "progress 10%"),
    ("name \u202eexe.txt", "name \\u202eexe.txt", "name \\u202eexe.txt"),
    ("\u2066isolate\u2069 \u200f", "\\u2066isolate\\u2069 \\u200f",
     "\\u2066isolate\\u2069 \\u200f"),
    ("line\u2028sep", "line\\u2028sep", "line\\u2028sep"),
    ("bytes \udcff\udcfe", "bytes \\udcff\\udcfe", "bytes \\udcff\\udcfe"),
    ("a lone \x1b", "a lone \\x1b", "a lone \\x1b"),
    ("\x1b[31mred \x1b]0;t\x07\x1b[0m", "red \\x1b]0;t\\x07", "\x1b[31mred \\x1b]0;t\\x07\x1b[0m"),
    ("emoji 👩‍🔬 and ünïcödé", "emoji 👩‍🔬 and ünïcödé", "emoji 👩‍🔬 and ünïcödé"),
    ("C:\\path\\x1b", "C:\\path\\x1b", "C:\\path\\x1b"),
]


@pytest.mark.parametrize(("line", "plain", "coloured"), CASES, ids=[repr(c[0])[:30] for c in CASES])
def test_ansi_in_log_lines_is_shown_escaped(line: str, plain: str, coloured: str) -> None:
    assert safe_line(line) == plain
    assert safe_line(line, colour=True) == coloured
    shown = log_text(line).plain
    for char in shown:  # what Rich prints: text and its own styles only
        assert char in "\t\n" or (char.isprintable() and not 0x80 <= ord(char) < 0xA0) \
            or char == "\u200d", (line, shown)


def test_escape_keeps_newlines_and_tabs_and_colour_becomes_rich_styles() -> None:
    assert escape("a\tb\nc\x1b[31m") == "a\tb\nc\\x1b[31m"
    text = log_text("\x1b[31mred\x1b[0m \x1b]0;t\x07")
    assert text.plain == "red \\x1b]0;t\\x07"
    assert [(s.start, s.end, str(s.style)) for s in text.spans] == [(0, 3, "color(1)")]
