"""One master per state dir: the master holds an exclusive flock on `<state dir>/master.lock`
for as long as it runs, and writes into it where it listens (URL), its PID and who started it.
A second `dettui` reads the file and attaches; a second `dettui serve` refuses, naming both.

Dashboards that use a master of their state dir hold a shared lock on `dashboards.lock`, so
the last one to quit knows it is the last.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

LOCK = "master.lock"
DASHBOARDS = "dashboards.lock"
SERVE, BACKGROUND = "serve", "background"  # started by `dettui serve`, or by a dashboard


def default_dir() -> Path:
    """The state dir of a master started without `--state-dir`: the user's data dir."""
    import platformdirs

    return Path(platformdirs.user_data_dir("dettui")) / "master"


@dataclass(frozen=True)
class Holder:
    """The master that holds a state dir's lock."""

    url: str
    pid: int
    mode: str  # SERVE or BACKGROUND

    @property
    def alive(self) -> bool:
        """The process is there and not a zombie (an exited master its parent has not
        reaped yet)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return True
        return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _flock(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class StateLock:
    """The master's side: take the lock (or learn who has it), publish the URL, let go."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK
        self._fd: int | None = None

    def acquire(self, patience: float = 1.0) -> bool:
        """Take the lock; False if another master holds it. A reader peeks with a shared lock
        for an instant, so a refusal is retried for `patience` seconds before it counts."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + patience
        while not _flock(fd, fcntl.LOCK_EX):
            if time.monotonic() > deadline or _read(self.path) is not None:
                os.close(fd)
                return False
            time.sleep(0.05)
        os.ftruncate(fd, 0)
        self._fd = fd
        return True

    def publish(self, url: str, mode: str) -> None:
        assert self._fd is not None, "publish() before acquire()"
        data = json.dumps({"url": url, "pid": os.getpid(), "mode": mode}).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def _read(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text())
        return Holder(str(data["url"]), int(data["pid"]), str(data.get("mode", SERVE)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def holder(state_dir: Path, wait: float = 10.0) -> Holder | None:
    """The master running on `state_dir`, or None. One that holds the lock but has not said
    where it listens yet (starting) is waited for, up to `wait` seconds."""
    path = state_dir / LOCK
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if _flock(fd, fcntl.LOCK_SH):
                return None  # nobody holds it
            found = _read(path)
        finally:
            os.close(fd)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


class DashboardLock:
    """A dashboard's shared hold on its state dir's master; `last()` tells whether no other
    dashboard holds one (after letting go of this one's)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / DASHBOARDS
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def last(self) -> bool:
        self.release()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            return _flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
