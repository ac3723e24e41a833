"""The master's disk: how much room is left where it keeps its state, and the refusal a write
meets when there is none (`StorageFull`, a 503 naming the filesystem). Below the store: the
store, the key file and the checkpoint storage all use it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from dettui.errors import StorageFull


def is_full(exc: BaseException) -> bool:
    """Whether an OS error says the filesystem (or the writer's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def full_disk(state_dir: Path, then: str = "nothing was stored. Free space there and try "
              "again (agents and trials send what they hold again by themselves)") -> StorageFull:
    """The refusal of a write to `state_dir` on a full filesystem, naming both; `then` says
    what follows."""
    free = free_bytes(state_dir)
    left = f"{free // 1024} KiB free" if free >= 0 else "no room"
    return StorageFull(f"the master's disk is full: the filesystem at {mount_point(state_dir)}, "
                       f"which holds its state dir {state_dir}, has {left}; {then}")


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of `path` (-1: unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


def mount_point(path: Path) -> Path:
    """The mount point of the filesystem that holds `path`."""
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path
