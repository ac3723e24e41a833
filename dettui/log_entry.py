"""A trial's log line as the dashboard holds it (its id, rank, level and stream, and its text made
safe to show), the level read from common formats when the shipper gave none, and the time
ranges the logs screen filters by. Pure: no I/O, no clock read inside."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta, tzinfo
from typing import Any

from dettui.terminal_text import safe_line

SCANNED = 200  # a level word is looked for in a line's first characters only
LEVELS = {"CRITICAL": "E", "FATAL": "E", "ERROR": "E", "WARNING": "W", "WARN": "W",
          "INFO": "I", "DEBUG": "D", "TRACE": "D"}
_WORD = re.compile(r"(?:^|[\s\[(|:=-])(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE)"
                   r"(?=[\]):\s|,-]|$)")
_KEY = re.compile(r"\blevel=\"?(critical|fatal|error|warning|warn|info|debug|trace)\b", re.I)
_GLOG = re.compile(r"^([EWIF])\d{4} \d\d:\d\d:\d\d")  # absl/glog: I1127 14:00:00.123 ...
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SINCE = re.compile(r"^(?:since|last)?\s*(\d+(?:\.\d+)?)\s*([smhd])$")


@dataclass(frozen=True, slots=True)
class LogEntry:
    id: int | None
    rank: int | None
    level: str  # E(rror), W(arning), I(nfo), D(ebug), or "" when unknown
    stderr: bool
    text: str  # what the trial wrote (the master's `[time] container [rank=N] ||` not in it)
    stamp: str = ""  # `2026-11-27 14:00:00.123 c0ffee12 [rank=0] `: for wide screens
    short: str = ""  # `14:00:00 r0 `: for narrow ones


def entry_of(item: dict[str, Any], tz: tzinfo | None = None) -> LogEntry:
    """One line of the logs route (Determined's v1TrialLogsResponse, with dettui's fields);
    its time is shown in `tz` (None: the local time zone), as the time range `t` reads it."""
    rank = item.get("rankId")
    rank = rank if isinstance(rank, int) else None
    text = safe_line(str(item.get("log") or item.get("message") or "").rstrip("\n"))
    level = str(item.get("level") or "").removeprefix("LOG_LEVEL_")
    stamp, short = _prefixes(item.get("timestamp"), item.get("containerId"), rank, tz)
    return LogEntry(_int(item.get("id")), rank, LEVELS.get(level) or level_of(text),
                    item.get("stdtype") == "stderr", text.replace("\n", "\\n"), stamp, short)


def _prefixes(when: Any, container: Any, rank: int | None,
              tz: tzinfo | None) -> tuple[str, str]:
    """A line's long and short prefix: its time (local), container and rank, as the
    master's message has them; none for a line without a time."""
    try:
        at = datetime.fromisoformat(str(when)).astimezone(tz) if when else None
    except ValueError:
        at = None
    if at is None:
        return "", ""
    long = [at.strftime("%Y-%m-%d %H:%M:%S.") + f"{at.microsecond // 1000:03d}"]
    short = [at.strftime("%H:%M:%S")]
    if container:
        long.append(safe_line(str(container))[:8].ljust(8))
    if rank is not None:
        long.append(f"[rank={rank}]")
        short.append(f"r{rank}")
    return " ".join(long) + " ", " ".join(short) + " "


def level_of(text: str) -> str:
    """The level a line names in a common format (Python's logging, `[WARN]`, `level=info`,
    glog's `E1127 …`, a traceback), as a letter; "" if none."""
    head = text[:SCANNED]
    if found := _GLOG.match(head):
        return "E" if found[1] == "F" else found[1]
    if found := _WORD.search(head):
        return LEVELS[found[1]]
    if found := _KEY.search(head):
        return LEVELS[found[1].upper()]
    return "E" if head.startswith("Traceback (most recent call last)") else ""


def time_range(text: str, now: datetime) -> tuple[float | None, float | None]:
    """(since, until) in Unix seconds for what a user types: `since 10m`, `2h`, `14:00-14:30`,
    `14:00-`, `-9:30`, `14:00` (since then), `2026-11-22 14:00 - 2026-11-22 15:00`; "" is no
    range. Clock times are `now`'s day in its time zone. ValueError says what was not
    understood."""
    text = text.strip().lower()
    if not text:
        return None, None
    if found := _SINCE.match(text):
        return (now - timedelta(seconds=float(found[1]) * _UNITS[found[2]])).timestamp(), None
    with contextlib.suppress(ValueError):
        return _moment(text.removeprefix("since").strip(), now), None  # one moment: since it
    start, sep, end = text.partition(" - ") if " - " in text else text.partition("-")
    if not sep and ":" not in text:
        raise ValueError(f"not a time range: {text!r} (try 'since 10m' or '14:00-14:30')")
    since = _moment(start, now) if start.strip() else None
    until = _moment(end, now) if end.strip() else None
    if since is not None and until is not None and until <= since:
        raise ValueError(f"the range ends before it starts: {text!r}")
    return since, until


def _moment(text: str, now: datetime) -> float:
    text = text.strip()
    try:
        if len(text) <= 8:
            at = time.fromisoformat(text if len(text.split(":")[0]) == 2 else "0" + text)
            return datetime.combine(now.date(), at, now.tzinfo).timestamp()
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (HH:MM, or YYYY-MM-DD HH:MM)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=now.tzinfo)).timestamp()


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
