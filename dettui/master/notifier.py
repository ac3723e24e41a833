"""In-process change notifications: log followers and long-polls wait on topics."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterable, Iterator


class Changes:
    """What a watcher has been notified of since it last looked: per topic, the ids that
    changed, or None when the notification did not say (everything may have)."""

    def __init__(self) -> None:
        self.flag = asyncio.Event()
        self._seen: dict[str, set[str] | None] = {}

    def add(self, topic: str, ids: set[str] | None) -> None:
        if topic in self._seen:
            known = self._seen[topic]
            self._seen[topic] = None if known is None or ids is None else known | ids
        else:
            self._seen[topic] = None if ids is None else set(ids)
        self.flag.set()

    def take(self) -> dict[str, set[str] | None]:
        """The changes so far, and forget them (clears the flag)."""
        seen, self._seen = self._seen, {}
        self.flag.clear()
        return seen

    def clear(self) -> None:
        self.take()

    async def wait(self) -> None:
        await self.flag.wait()


class Notifier:
    """Wake everyone waiting on a topic (e.g. ``"trial:7"``). Waiters re-read; a notification
    may name the ids that changed (`ids`), so that a watcher re-reads only those."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._watchers: dict[str, set[Changes]] = {}

    def notify(self, *topics: str, ids: Iterable[object] | None = None) -> None:
        changed = None if ids is None else {str(i) for i in ids}
        for topic in topics:
            event = self._events.pop(topic, None)
            if event is not None:
                event.set()
            for watcher in self._watchers.get(topic, ()):
                watcher.add(topic, changed)

    async def wait(self, topic: str, timeout: float) -> bool:
        """Wait for the next notification on `topic`; False on timeout."""
        event = self._events[topic]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
            return True
        return False

    @contextlib.contextmanager
    def watching(self, *topics: str) -> Iterator[Changes]:
        """The notifications of any of `topics` while the block runs. The caller takes (or
        clears) them before re-reading, so nothing notified during a read is missed."""
        changes = Changes()
        for topic in topics:
            self._watchers.setdefault(topic, set()).add(changes)
        try:
            yield changes
        finally:
            for topic in topics:
                watchers = self._watchers.get(topic)
                if watchers is not None:
                    watchers.discard(changes)
                    if not watchers:
                        del self._watchers[topic]

    def watched(self) -> set[str]:
        """The topics someone is watching now."""
        return set(self._watchers)
