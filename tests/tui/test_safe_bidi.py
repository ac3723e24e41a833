"""The dashboard shows names without bidi controls (second review: an experiment named
"evil\\u202eabc" reached the experiments list and header as the raw override)."""

from __future__ import annotations

import pytest

from dettui.widgets.safe import REPLACEMENT, clean, plain


@pytest.mark.parametrize("char", ["\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u061c",
                                  "\u2028", "\u2029"])
def test_bidi_controls_and_line_separators_are_replaced(char: str) -> None:
    assert clean(f"evil{char}abc") == f"evil{REPLACEMENT}abc"
    assert plain("x", char).plain == f"x{REPLACEMENT}"
    assert clean(f"a{char}b", newlines=True) == f"a{REPLACEMENT}b"


def test_ordinary_text_is_untouched() -> None:
    for text in ("résumé 学习 émoji 🙂", "a-b_c.d", "tab\there"):
        assert clean(text) == text.replace("\t", "    ")
