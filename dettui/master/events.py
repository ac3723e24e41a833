"""In-process change notifications: log followers and long-polls wait on topics."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator


class Notifier:
    """Wake everyone waiting on a topic (e.g. ``"trial:7"``). No payloads: waiters re-read."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._watchers: dict[str, set[asyncio.Event]] = {}

    def notify(self, *topics: str) -> None:
        for topic in topics:
            event = self._events.pop(topic, None)
            if event is not None:
                event.set()
            for flag in self._watchers.get(topic, ()):
                flag.set()

    async def wait(self, topic: str, timeout: float) -> bool:
        """Wait for the next notification on `topic`; False on timeout."""
        event = self._events[topic]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
            return True
        return False

    @contextlib.contextmanager
    def watching(self, *topics: str) -> Iterator[asyncio.Event]:
        """A flag set by every notification of any of `topics` while the block runs. The
        caller clears it before re-reading, so nothing notified during a read is missed."""
        flag = asyncio.Event()
        for topic in topics:
            self._watchers.setdefault(topic, set()).add(flag)
        try:
            yield flag
        finally:
            for topic in topics:
                flags = self._watchers.get(topic)
                if flags is not None:
                    flags.discard(flag)
                    if not flags:
                        del self._watchers[topic]

    def watched(self) -> set[str]:
        """The topics someone is watching now."""
        return set(self._watchers)
