"""An allocation's log lines on their way to the master, exactly once.

Every line gets the next sequence number of its allocation and is appended to a spool file
(outside the allocation's work dir) before it is shipped; a batch leaves the spool only when the
master has acknowledged it, and the master ignores sequence numbers it already has. So a master
that restarts mid-flood loses nothing and duplicates nothing; an agent killed with SIGKILL loses
at most what it had not yet written to the file, and the agent that starts next ships what the
file holds, with a line saying that lines may be missing after it.

At most MAX_MEMORY lines are kept in memory; beyond that they stay in the file and are read back
as the master catches up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Container
from pathlib import Path
from typing import Any

from dettui.agent.logship import Line

log = logging.getLogger("dettui.agent")
MAX_MEMORY = 50_000  # lines kept in memory, waiting for the master
DIRECTORY = ".logs"  # under the agent's work root
UNSHIPPED = ".unshipped"  # an allocation that ended before the master took all its lines


class Spool:
    def __init__(self, directory: Path, alloc_id: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.alloc_id = alloc_id
        self.path = directory / f"{alloc_id}.jsonl"
        self._file = open(self.path, "ab")  # noqa: SIM115 - open for the allocation's life
        self._seq = 0
        self._window: deque[dict[str, Any]] = deque()  # unacknowledged, in order
        self._spilled: int | None = None  # file offset of the first line not in the window
        self._offset = self._file.tell()

    @property
    def pending(self) -> int:
        """Lines not yet acknowledged that are in memory (more may wait in the file)."""
        return len(self._window) + (1 if self._spilled is not None else 0)

    def append(self, line: Line) -> None:
        self._seq += 1
        item = {**line.wire(self.alloc_id), "seq": self._seq}
        data = json.dumps(item, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
        if self._spilled is None and len(self._window) >= MAX_MEMORY:
            self._spilled = self._offset
        if self._spilled is None:
            self._window.append(item)
        self._file.write(data)
        self._offset += len(data)

    def sync(self) -> None:
        """Hand what was appended to the operating system (it survives the agent then)."""
        with contextlib.suppress(OSError, ValueError):
            self._file.flush()

    def batch(self, size: int) -> list[dict[str, Any]]:
        """The oldest unacknowledged lines, at most `size` (read back from the file when the
        window ran dry)."""
        if not self._window and self._spilled is not None:
            self._refill()
        return [self._window[i] for i in range(min(size, len(self._window)))]

    def ack(self, upto: int) -> None:
        """The master has every line up to sequence number `upto`."""
        while self._window and self._window[0]["seq"] <= upto:
            self._window.popleft()

    def _refill(self) -> None:
        self.sync()
        assert self._spilled is not None
        with open(self.path, "rb") as f:
            f.seek(self._spilled)
            while len(self._window) < MAX_MEMORY:
                raw = f.readline()
                if not raw:
                    break
                self._window.append(json.loads(raw))
            at = f.tell()
        self._spilled = at if at < self._offset else None

    def close(self, shipped: bool) -> None:
        """The allocation ended: the file goes if everything was shipped, else it is left for
        the agent to ship later (`leftovers`)."""
        with contextlib.suppress(OSError, ValueError):
            self._file.close()
        with contextlib.suppress(OSError):
            if shipped:
                self.path.unlink()
            else:
                self.path.rename(self.path.with_name(self.alloc_id + UNSHIPPED + ".jsonl"))


def leftovers(directory: Path, running: Container[str],
              started: Container[str] = frozenset()) -> list[tuple[Path, list[dict[str, Any]]]]:
    """Spools not of a running allocation: ones that ended before the master took all their
    lines, and ones an earlier run of this agent left when it was killed (those get a last line
    saying that later lines may be missing). Each with its lines; remove the file once shipped.

    `running` and `started` (the allocations this agent process started) are read as the files
    are: an allocation that starts while this runs is in `started` before its spool exists, so
    its open spool is never taken for a killed agent's (that took a live allocation's file,
    and its first line lost to the notice's sequence number)."""
    out: list[tuple[Path, list[dict[str, Any]]]] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.jsonl")):
        killed = not path.name.endswith(UNSHIPPED + ".jsonl")
        alloc_id = path.name.removesuffix(".jsonl").removesuffix(UNSHIPPED)
        if alloc_id in running or (killed and alloc_id in started):
            continue
        lines = []
        try:
            with open(path, "rb") as f:
                for raw in f:
                    with contextlib.suppress(ValueError):
                        lines.append(json.loads(raw))
        except FileNotFoundError:  # renamed or removed by its allocation meanwhile
            continue
        if killed:
            last = max((int(x.get("seq") or 0) for x in lines), default=0)
            lines.append({"allocationId": alloc_id, "timestamp": time.time(), "rankId": None,
                          "stdtype": "stderr", "level": "ERROR", "seq": last + 1,
                          "log": "the agent was killed while this allocation ran: lines it "
                                 f"wrote after line {last} may be missing\n"})
        out.append((path, lines))
    return out
