"""Output lines: split on \\r and \\n, rank and level prefixes parsed."""

from __future__ import annotations

from dettui.agent.logship import MAX_LINE, parse, split_chunks


def test_split_keeps_the_unfinished_rest() -> None:
    pieces, rest = split_chunks(b"a\nb\rc\npartial")
    assert pieces == [b"a", b"b", b"c"]
    assert rest == b"partial"


def test_long_lines_are_cut() -> None:
    pieces, _ = split_chunks(b"x" * (MAX_LINE + 10) + b"\n")
    assert [len(p) for p in pieces] == [MAX_LINE, 10]


def test_rank_and_level_prefixes() -> None:
    line = parse(b"[rank=3] WARNING: disk almost full", "stderr", now=1.0)
    assert (line.rank, line.level, line.text, line.stdtype) == (
        3, "WARNING", "disk almost full\n", "stderr")
    plain = parse(b"hello", "stdout", now=1.0)
    assert (plain.rank, plain.level, plain.text) == (None, None, "hello\n")
