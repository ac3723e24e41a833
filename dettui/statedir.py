"""One master per state dir: the master holds an exclusive flock on `<state dir>/master.lock`
for as long as it runs, and writes into it where it listens (URL), its PID and who started it.
A second `dettui` reads the file and attaches; a second `dettui serve` refuses, naming both.

Dashboards that use a master of their state dir hold a shared lock on `dashboards.lock`, so
the last one to quit knows it is the last.

A lock file is believed only when it and its state dir belong to this user (the effective uid)
and no one else may write them: another local user could otherwise plant one (in a shared /tmp
dir) naming a server of theirs, to which the CLI would send passwords and tokens, or a pid of
this user's to be signalled. A state dir or lock of another user raises `Untrusted`; a pid is
signalled only if `Holder.ours` (a dettui process of this user).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from dettui.errors import PermissionDenied

LOCK = "master.lock"
DASHBOARDS = "dashboards.lock"
# What the master keeps at the top of its state dir (checked before it trusts them).
OWN_FILES = ("master.db", "master.db-wal", "master.db-shm", "secret.key", LOCK, DASHBOARDS,
             "master.log", "dettui.log")
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
            status = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return True
        return status.rpartition(")")[2].split()[:1] != ["Z"]

    def ours(self) -> str | None:
        """Why this pid may not be signalled (None: it is a dettui process of this user): a
        lock file names the pid, and a pid is reused by any process once the master is gone."""
        try:
            owner = os.stat(f"/proc/{self.pid}").st_uid
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return f"no process {self.pid} runs"
        if owner != os.geteuid():
            return f"process {self.pid} belongs to uid {owner}"
        if b"dettui" not in cmdline:
            return f"process {self.pid} is not a dettui master"
        return None


class Untrusted(PermissionDenied):
    """A state dir or lock file of another user, or one others may write: its master is not
    believed. The message is one line naming the file and why."""

    title = "Ignoring"

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"ignoring the master recorded in {path}: {why}")
        self.path = path
        self.why = why


def _distrust(what: str, st: os.stat_result) -> str | None:
    """Why a file or directory with status `st` is not to be trusted, or None."""
    if st.st_uid != os.geteuid():
        return f"{what} belongs to uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_dir(state_dir: Path) -> None:
    """Raise Untrusted when `state_dir` (if it exists) is another user's or writable by
    others."""
    try:
        st = os.stat(state_dir)
    except FileNotFoundError:
        return
    why = _distrust(f"the directory {state_dir}", st)
    if why is not None:
        raise Untrusted(state_dir / LOCK, why)


def check_own(state_dir: Path) -> None:
    """The master's side: refuse to keep state in a directory (or files in it) another user
    owns or others may write: they could read the token key, or plant a store with their own
    admin."""
    for path in (state_dir, *(state_dir / name for name in OWN_FILES)):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        why = _distrust(str(path), st)
        if why is None and stat.S_ISLNK(st.st_mode):
            why = f"{path} is a symbolic link"
        if why is not None:
            raise PermissionDenied(f"refusing to keep the master's state in {state_dir}: {why}"
                                   " (use a directory of your own, mode 0700)")


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
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
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
        return _parse(path.read_bytes()[:4096])
    except OSError:
        return None


def _parse(raw: bytes) -> Holder | None:
    try:
        data = json.loads(raw)
        return Holder(str(data["url"]), int(data["pid"]), str(data.get("mode", SERVE)))
    except (ValueError, KeyError, TypeError):
        return None


def _open_lock(state_dir: Path) -> int:
    """The state dir's lock file, opened for reading after checking that it and its dir are
    this user's alone (Untrusted if not); FileNotFoundError when there is none."""
    check_dir(state_dir)
    path = state_dir / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Untrusted(path, "the file is a symbolic link") from exc
        raise
    why = _distrust("the file", os.fstat(fd))
    if why is None and not stat.S_ISREG(os.fstat(fd).st_mode):
        why = "it is not a regular file"
    if why is not None:
        os.close(fd)
        raise Untrusted(path, why)
    return fd


def last_url(state_dir: Path) -> str | None:
    """Where the state dir's last master listened, as its lock file still says after it was
    killed (one that stopped cleanly emptied it); None if unknown or not to be trusted."""
    try:
        fd = _open_lock(state_dir)
    except (OSError, Untrusted):
        return None
    try:
        found = _parse(os.pread(fd, 4096, 0))
    finally:
        os.close(fd)
    return found.url if found is not None else None


def holder(state_dir: Path, wait: float = 10.0) -> Holder | None:
    """The master running on `state_dir`, or None. One that holds the lock but has not said
    where it listens yet (starting) is waited for, up to `wait` seconds. Untrusted when the
    lock file or the state dir is not this user's alone."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = _open_lock(state_dir)
        except FileNotFoundError:
            return None
        try:
            if _flock(fd, fcntl.LOCK_SH):
                return None  # nobody holds it
            found = _parse(os.pread(fd, 4096, 0))
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
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                                       0o600)
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def last(self) -> bool:
        self.release()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            return _flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
