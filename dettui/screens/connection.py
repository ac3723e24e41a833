"""Whether the dashboard is in touch with its master: every screen's feed (a push stream) says
when its stream breaks and when a message comes through again; the dashboard is "down" from the
first break until every feed has been heard from again. The screens draw a banner and mark
their rows as stale while it is down, and read their data again when it is back up."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

HEARTBEAT = 4.0  # s without a message after which a feed pings the master; no pong in half
# of it and the stream counts as broken (a master that hangs with its socket open)
REASON_CHARS = 200  # of the last error, as the banner shows it


@dataclass(frozen=True)
class Outage:
    """The master cannot be reached since `since` (wall-clock seconds), last because of
    `reason`."""

    url: str
    since: float
    reason: str

    def clock(self) -> str:
        """When it began, as the terminal's clock shows it: "16:03:12"."""
        return time.strftime("%H:%M:%S", time.localtime(self.since))

    def text(self) -> str:
        """"master http://… unreachable since 16:03:12, retrying (connection refused)"."""
        reason = self.short_reason()
        return (f"master {self.url} unreachable since {self.clock()}, retrying"
                + (f" ({reason})" if reason else ""))

    def short_reason(self) -> str:
        """The last error in a few words (the banner already names the master)."""
        reason = self.reason
        for words, short in KNOWN_REASONS:
            if words in reason:
                return short
        reason = reason.removeprefix(f"cannot reach the master at {self.url}: ")
        return reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 1] + "…"


KNOWN_REASONS = [  # words in a client error -> what the banner says
    ("closed the stream", "the master closed the connection"),
    ("Connect call failed", "connection refused"),
    ("Connection refused", "connection refused"),
    ("No PONG", "no answer to the stream's heartbeat"),
    ("did not answer in time", "no answer in time"),
]


class Connection:
    """The feeds' shared view of the master. `changed(outage_or_None, came_back)` is called
    when the dashboard goes down, when the reason changes while down, and when it comes back.
    `now` gives wall-clock seconds (a test passes its own)."""

    def __init__(self, url: str, changed: Callable[[Outage | None, bool], None], *,
                 now: Callable[[], float] = time.time) -> None:
        self.url = url
        self._changed = changed
        self._now = now
        self._ids = itertools.count(1)
        self._broken: dict[int, str] = {}  # feed -> why its stream broke
        self.outage: Outage | None = None

    def open(self) -> int:
        """A new feed: its id for `lost`, `heard` and `close`."""
        return next(self._ids)

    def lost(self, feed: int, reason: str) -> None:
        """The feed's stream broke or ended; it is retrying."""
        self._broken[feed] = reason
        self._update(reason)

    def heard(self, feed: int) -> None:
        """A message came through on the feed."""
        if self._broken.pop(feed, None) is not None:
            self._update("")

    def close(self, feed: int) -> None:
        """The feed ended (its screen went away)."""
        if self._broken.pop(feed, None) is not None:
            self._update("")

    def _update(self, reason: str) -> None:
        before = self.outage
        if not self._broken:
            self.outage = None
        elif before is None:
            self.outage = Outage(self.url, self._now(), reason)
        elif reason and reason != before.reason:
            self.outage = Outage(self.url, before.since, reason)
        if self.outage != before:
            self._changed(self.outage, before is not None and self.outage is None)
