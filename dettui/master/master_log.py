"""The master's own log lines, kept in memory for `det master logs` (and support bundles), as
Determined's master keeps its recent entries in a ring buffer: the last MAX_ENTRIES lines since
the master started, each with an id, its time and its level. Followers wait on `wait_after`.
The ring also holds at most MAX_KEPT_CHARS characters of text (the oldest lines go first), so a
flood of long lines cannot make it, or an answer of all of it, large."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

MAX_ENTRIES = 25_000  # Determined's master keeps as many
MAX_MESSAGE = 8_192  # characters of one line kept (a traceback is cut, not the buffer)
MAX_KEPT_CHARS = 4_000_000  # characters of all lines kept: 25,000 lines of 160 on average
LEVELS = {logging.DEBUG: "LOG_LEVEL_DEBUG", logging.INFO: "LOG_LEVEL_INFO",
          logging.WARNING: "LOG_LEVEL_WARNING", logging.ERROR: "LOG_LEVEL_ERROR",
          logging.CRITICAL: "LOG_LEVEL_CRITICAL"}


@dataclass(frozen=True)
class Entry:
    id: int  # 0 for the first line since the master started
    time: float
    level: str  # LOG_LEVEL_*
    message: str


def level_name(levelno: int) -> str:
    """Determined's LogLevel for a Python level (in-between levels round down)."""
    best = max((lv for lv in LEVELS if lv <= levelno), default=logging.DEBUG)
    return LEVELS[best] if levelno >= logging.DEBUG else "LOG_LEVEL_TRACE"


class MasterLog(logging.Handler):
    """A logging handler that keeps the last `capacity` lines, of at most `chars` characters
    in all; safe from any thread."""

    def __init__(self, capacity: int = MAX_ENTRIES, chars: int = MAX_KEPT_CHARS) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self._entries: deque[Entry] = deque()
        self._capacity = capacity
        self._most_chars = chars
        self._chars = 0  # characters of the lines kept
        self._next = 0
        self._guard = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)[:MAX_MESSAGE]
        except Exception:  # noqa: BLE001 - a bad record must not break the master
            message = str(record.msg)[:MAX_MESSAGE]
        with self._guard:
            self._entries.append(Entry(self._next, record.created, level_name(record.levelno),
                                       message))
            self._chars += len(message)
            while len(self._entries) > self._capacity or self._chars > self._most_chars:
                self._chars -= len(self._entries.popleft().message)
            self._next += 1
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)

    def entries(self, offset: int = 0) -> list[Entry]:
        """Lines from `offset` on, counted in what is kept (negative: that many from the end)."""
        with self._guard:
            kept = list(self._entries)
        return kept[offset:] if offset >= 0 else kept[max(len(kept) + offset, 0):]

    def last_id(self) -> int:
        """The id of the newest line (-1: none yet)."""
        with self._guard:
            return self._next - 1

    def after(self, entry_id: int) -> list[Entry]:
        """Lines newer than the one of id `entry_id` (-1: every line kept)."""
        with self._guard:
            return [e for e in self._entries if e.id > entry_id]

    async def wait_after(self, entry_id: int, timeout: float) -> None:
        """Return once a line newer than `entry_id` exists, or after `timeout` seconds."""
        event = asyncio.Event()
        with self._guard:
            if self._next - 1 > entry_id:
                return
            self._waiters.append((asyncio.get_running_loop(), event))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)


@contextlib.contextmanager
def kept(handler: MasterLog) -> Iterator[MasterLog]:
    """Attach `handler` to the root logger while the master runs."""
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
