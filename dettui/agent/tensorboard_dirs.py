"""The TensorBoard directory of a trial, made by the agent before the trial starts.

Determined's harness (and dettui's Core API) writes a trial's TensorBoard events under the
checkpoint storage, at `<storage>/<cluster>/tensorboard/experiment/E/trial/T`. The storage root
is open to every trial user (mode 1777, as /tmp), so if the first trial made the levels above
its own directory, they would be its user's (mode 0700 or 0755): every other user's trials then
fail to write there (the real package fails at `core.init()`), and that first user could rename
or plant other users' event directories. So the agent (root) makes them: the shared levels
(`<cluster>`, `tensorboard`, `experiment`, `E`, `trial`) root's and 0755, and the trial's own
directory `T` its user's. A level some user made first is taken back (root's, 0755); a link
or file a user put in a level's place is removed (never followed) and the level made; one of
root's own is left alone and the trial told its TensorBoard events cannot be written. Only
the master's own storage root gets this (a `storage_path` under it is a user's name).
Every level is opened from its parent's descriptor without following links (dettui.dirfd), so
nothing outside the storage is ever changed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from dettui import dirfd

SHARED_MODE = 0o755


def levels(cluster_id: str, experiment_id: str, trial_id: str) -> list[str]:
    """The names from the storage root down to the trial's directory (ValueError when an id
    could name anything but one plain directory)."""
    names = [cluster_id, "tensorboard", "experiment", experiment_id, "trial", trial_id]
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise ValueError(f"not a directory name: {name!r}")
    return names


def prepare(root: Path, cluster_id: str, experiment_id: str, trial_id: str, uid: int,
            gid: int) -> str | None:
    """Make the trial's TensorBoard directory under the storage `root` (a directory the
    master or this agent chose), the shared levels root's, the last `uid`'s. None when done,
    else why not (a sentence for the trial's log)."""
    try:
        names = levels(cluster_id, experiment_id, trial_id)
    except ValueError as exc:
        return str(exc)
    try:
        fd = dirfd.open_path(root)
    except OSError as exc:
        return f"cannot open the checkpoint storage {root}: {exc.strerror or exc}"
    try:
        for depth, name in enumerate(names):
            last = depth == len(names) - 1
            child = _level(fd, name, (uid, gid) if last else (0, 0))
            os.close(fd)
            fd = child
    except OSError as exc:
        return (f"cannot make its TensorBoard directory under {root}: {name}: "
                f"{exc.strerror or exc}")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return None


def _level(parent: int, name: str, owner: tuple[int, int]) -> int:
    """The directory `name` in `parent`, made if missing, owned by `owner`, mode 0755; its
    descriptor. A link or file a user put there first (a squatter: any trial user may write
    the storage root) is removed and the directory made; OSError when that fails, or when it
    is root's own."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, SHARED_MODE, dir_fd=parent)
    try:
        fd = dirfd.open_dir(parent, name)  # ELOOP / ENOTDIR for a link or a file
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if os.stat(name, dir_fd=parent, follow_symlinks=False).st_uid == 0:
            raise
        os.unlink(name, dir_fd=parent)  # the link itself, never what it names
        os.mkdir(name, SHARED_MODE, dir_fd=parent)
        fd = dirfd.open_dir(parent, name)
    try:
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != owner:
            os.fchown(fd, *owner)
        if stat.S_IMODE(st.st_mode) != SHARED_MODE:
            os.fchmod(fd, SHARED_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd
