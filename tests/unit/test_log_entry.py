"""The logs screen's reading of a line (its level from common formats, its stream, its text
made safe) and of the time ranges a user types."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from dettui.log_entry import entry_of, level_of, time_range

NOW = datetime(2026, 11, 27, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "level"), [
    ("INFO:root:step 10", "I"),
    ("2026-11-27 14:00:00,001 - trainer - WARNING - lr too high", "W"),
    ("[2026-11-27 14:00:00] ERROR: CUDA out of memory", "E"),
    ("[WARN] slow data loader", "W"),
    ("CRITICAL: disk full", "E"),
    ('ts=2026-11-27 level=debug msg="loss"', "D"),
    ("time=1 level=Error msg=x", "E"),
    ("E1127 14:00:00.123456 12345 nccl.cc:10] bad shard", "E"),
    ("W1127 14:00:00.123456 12345 x.cc:1] slow", "W"),
    ("F1127 14:00:00.123456 12345 x.cc:1] fatal", "E"),
    ("Traceback (most recent call last):", "E"),
    ("step 10: loss 0.5 errors_seen=0", ""),  # a word inside another is no level
    ("INFORMATION about DEBUGGING", ""),
    ("info: lower case is not a level word", ""),
    ("x" * 300 + " ERROR: too far in to be the line's level", ""),
])
def test_level_of_common_formats(text: str, level: str) -> None:
    assert level_of(text) == level


def test_entry_prefers_the_shippers_level_and_marks_stderr() -> None:
    entry = entry_of({"id": "7", "rankId": 1, "level": "LOG_LEVEL_WARNING",
                      "message": "[ts] c [rank=1] || WARNING: ERROR later\n",
                      "log": "ERROR later\n", "stdtype": "stderr"})
    assert (entry.id, entry.rank, entry.level, entry.stderr) == (7, 1, "W", True)
    assert entry.text == "ERROR later"  # what the trial wrote; the prefix is apart
    assert (entry.stamp, entry.short) == ("", "")  # (no time: no prefix)
    plain = entry_of({"message": "\x1b[31mred\x1b[0m two\nlines [b]x[/]", "rankId": "0"})
    assert (plain.id, plain.rank, plain.level, plain.stderr) == (None, None, "", False)
    assert plain.text == "red two\\nlines [b]x[/]"


def test_the_prefix_is_long_for_wide_screens_and_short_for_narrow_ones() -> None:
    """The master's `[time] container [rank=N] ||`, kept apart from the text: in full (local
    date and time, container, rank) or as `HH:MM:SS rN` (43 columns or 12)."""
    entry = entry_of({"id": "7", "rankId": 1, "timestamp": "2026-11-27T14:00:05.123456Z",
                      "containerId": "c0ffee1234567", "log": "step 10\n",
                      "message": "[2026-11-27T14:00:05.123456Z] c0ffee12 [rank=1] || step 10"},
                     timezone(timedelta(hours=1)))
    assert entry.text == "step 10"
    assert entry.stamp == "2026-11-27 15:00:05.123 c0ffee12 [rank=1] "
    assert entry.short == "15:00:05 r1 "


def at(hour: int, minute: int, day: int = 27) -> float:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("text", "expected"), [
    ("", (None, None)),
    ("since 10m", ((NOW - timedelta(minutes=10)).timestamp(), None)),
    ("2h", ((NOW - timedelta(hours=2)).timestamp(), None)),
    ("last 1.5d", ((NOW - timedelta(days=1.5)).timestamp(), None)),
    ("14:00-14:30", (at(14, 0), at(14, 30))),
    ("9:05-", (at(9, 5), None)),
    ("-9:30", (None, at(9, 30))),
    ("14:00", (at(14, 0), None)),
    ("since 14:00", (at(14, 0), None)),
    ("2026-11-22 14:00 - 2026-11-22 15:00", (at(14, 0, 22), at(15, 0, 22))),
    ("2026-11-22T14:00:00+00:00", (at(14, 0, 22), None)),
])
def test_time_range(text: str, expected: tuple[float | None, float | None]) -> None:
    assert time_range(text, NOW) == expected


@pytest.mark.parametrize(("text", "error"), [
    ("yesterday", "not a time range"),
    ("14:30-14:00", "ends before it starts"),
    ("25:00-26:00", "not a time"),
    ("10 parsecs", "not a time range"),
])
def test_time_range_refuses_what_it_cannot_read(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        time_range(text, NOW)
