"""An allocation's log lines on their way to the master, exactly once.

Every line gets the next sequence number of its allocation and is appended to a spool file
(outside the allocation's work dir) before it is shipped; a batch leaves the spool only when the
master has acknowledged it, and the master ignores sequence numbers it already has. So a master
that restarts mid-flood loses nothing and duplicates nothing; an agent killed with SIGKILL loses
at most what it had not yet written to the file, and the agent that starts next ships what the
file holds, with a line saying that lines may be missing after it.

At most MAX_MEMORY lines are kept in memory; beyond that they stay in the file and are read back
as the master catches up.

A full disk (the agent's work root is often on the master's state dir) does not end the
allocation nor lose its lines: once the file cannot take a line, the file keeps the whole lines
it has and later ones stay in memory (MAX_HELD more at most; past that they are counted and a
line says how many were lost), shipped in order when the master can take them again, which is
itself often waiting for space. The allocation then ships them with no time limit before its
exit report (they exist nowhere else), and what is still unshipped when it ends is written to
the unshipped file if there is room by then.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Container
from pathlib import Path
from typing import Any

from dettui.agent.logship import Line

log = logging.getLogger("dettui.agent")
MAX_MEMORY = 50_000  # lines kept in memory, waiting for the master
MAX_HELD = 200_000  # more lines kept in memory when the file cannot take them (a full disk)
FLUSH_BYTES = 64 * 1024  # appended lines are written to the file in pieces of this size
DIRECTORY = ".logs"  # under the agent's work root
UNSHIPPED = ".unshipped"  # an allocation that ended before the master took all its lines


class Spool:
    def __init__(self, directory: Path, alloc_id: str) -> None:
        self.alloc_id = alloc_id
        self.path = directory / f"{alloc_id}.jsonl"
        self._seq = 0
        self._window: deque[dict[str, Any]] = deque()  # unacknowledged, in order
        self._spilled: int | None = None  # file offset of the first line not in the window
        self._offset = 0  # where the file's last whole line ends
        self._buffer: list[bytes] = []  # appended, not yet written to the file
        self._buffered = 0
        self._unwritten: list[dict[str, Any]] = []  # lines of the buffer not in the window
        self._held: deque[dict[str, Any]] = deque()  # after the file's lines, in memory only
        self.dropped = 0  # lines lost: no room in the file nor in memory
        self._fd: int | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o600)
            self._offset = os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            self._no_file(exc)

    @property
    def memory_only(self) -> bool:
        """The file could not take the lines (a full disk): unshipped ones exist only here."""
        return self._fd is None

    @property
    def pending(self) -> int:
        """Lines not yet acknowledged that are in memory (more may wait in the file)."""
        return len(self._window) + len(self._held) + (1 if self._spilled is not None else 0)

    def append(self, line: Line) -> None:
        self._seq += 1
        item = {**line.wire(self.alloc_id), "seq": self._seq}
        if self._fd is None:
            self._keep(item)
            return
        data = json.dumps(item, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
        if self._spilled is None and len(self._window) >= MAX_MEMORY:
            self._spilled = self._offset + self._buffered
        if self._spilled is None:
            self._window.append(item)
        else:
            self._unwritten.append(item)
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered >= FLUSH_BYTES:
            self._write()

    def _keep(self, item: dict[str, Any]) -> None:
        """Memory only: after the window (or the file's lines and those held), up to MAX_HELD
        more; lines beyond are counted, and once there is room a line says how many were lost
        (under the number of the last of them, which the master never got)."""
        room = MAX_MEMORY + MAX_HELD - len(self._window) - len(self._held)
        if room <= (1 if self.dropped else 0):
            self.dropped += 1
            return
        if self.dropped:
            self._place({**item, "seq": item["seq"] - 1, "stdtype": "stderr", "level": "ERROR",
                         "rankId": None,
                         "log": f"{self.dropped} log lines before this one were lost: the agent's "
                                "disk was full and the master could not take them\n"})
            self.dropped = 0
        self._place(item)

    def _place(self, item: dict[str, Any]) -> None:
        if self._spilled is None and not self._held:
            self._window.append(item)
        else:
            self._held.append(item)

    def sync(self) -> None:
        """Hand what was appended to the operating system (it survives the agent then)."""
        self._write()

    def _write(self) -> None:
        if not self._buffer or self._fd is None:
            return
        data = b"".join(self._buffer)
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as exc:
            with contextlib.suppress(OSError):  # no half line: the file ends with a whole one
                os.ftruncate(self._fd, self._offset)
            self._no_file(exc)
            return
        self._offset += len(data)
        self._buffer.clear()
        self._buffered = 0
        self._unwritten.clear()

    def _no_file(self, exc: OSError) -> None:
        """The file takes no more lines (ENOSPC, EDQUOT, ...): those it has not got stay in
        memory, after what it holds, until the master takes them."""
        log.warning("allocation %s: cannot keep its log lines in %s (%s); keeping them in "
                    "memory until the master takes them", self.alloc_id, self.path, exc)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._held.extend(self._unwritten)
        self._unwritten.clear()
        self._buffer.clear()
        self._buffered = 0

    def batch(self, size: int) -> list[dict[str, Any]]:
        """The oldest unacknowledged lines, at most `size` (read back from the file, then from
        those held in memory, when the window ran dry)."""
        if not self._window:
            self._refill()
        return [self._window[i] for i in range(min(size, len(self._window)))]

    def ack(self, upto: int) -> None:
        """The master has every line up to sequence number `upto`."""
        while self._window and self._window[0]["seq"] <= upto:
            self._window.popleft()

    def _refill(self) -> None:
        if self._spilled is not None:
            self.sync()
            lines, at = _read(self.path, self._spilled, self._offset, MAX_MEMORY)
            self._window.extend(lines)
            self._spilled = at if at < self._offset else None
        while self._spilled is None and self._held and len(self._window) < MAX_MEMORY:
            self._window.append(self._held.popleft())

    def _rest(self) -> list[dict[str, Any]]:
        """Every line not acknowledged, in order."""
        lines = list(self._window)
        if self._spilled is not None:
            lines += _read(self.path, self._spilled, self._offset, None)[0]
        return lines + list(self._held)

    def close(self, shipped: bool) -> None:
        """The allocation ended: the file goes if everything was shipped, else it is left for
        the agent to ship later (`leftovers`); lines that were only in memory are written to
        it then, if there is room now."""
        self._write()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        left = self.path.with_name(self.alloc_id + UNSHIPPED + ".jsonl")
        with contextlib.suppress(OSError):
            if shipped:
                self.path.unlink()
            elif self._fd is not None:
                self.path.rename(left)
        if not shipped and self._fd is None:
            self._save(left)
        self._fd = None

    def _save(self, left: Path) -> None:
        lines = self._rest()
        data = b"".join(json.dumps(x, ensure_ascii=False).encode("utf-8", "surrogatepass")
                        + b"\n" for x in lines)
        try:
            _write_file(left, data)
        except OSError as exc:
            log.error("allocation %s: %d log lines the master has not taken are lost: %s",
                      self.alloc_id, len(lines), exc)
        with contextlib.suppress(OSError):
            self.path.unlink()


def _read(path: Path, start: int, end: int,
          most: int | None) -> tuple[list[dict[str, Any]], int]:
    """Lines of the spool file from offset `start` up to `end` (at most `most`); and where
    the next line begins."""
    lines: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        f.seek(start)
        while f.tell() < end and (most is None or len(lines) < most):
            raw = f.readline()
            if not raw:
                break
            lines.append(json.loads(raw))
        return lines, f.tell()


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


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
                          "log": "the agent was killed while this allocation ran: "
                                 f"{_after(lines)} may be missing\n"})
        out.append((path, lines))
    return out


def _after(lines: list[dict[str, Any]]) -> str:
    """Which of a killed agent's allocation's lines may be lost: those after its last kept."""
    times = [x["timestamp"] for x in lines if isinstance(x.get("timestamp"), int | float)]
    if not times:
        return "its log lines"
    return f"its log lines after {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(max(times)))} UTC"
