"""Directory trees that someone else may be changing, walked, read and removed through file
descriptors: the master (root) reads and deletes checkpoint directories that unprivileged
trials wrote and can still rename and relink while the master works in them.

The rule: no path of more than one component is ever handed to the kernel inside such a tree.
Each directory is opened from the descriptor of its parent with O_NOFOLLOW | O_DIRECTORY, each
file with O_NOFOLLOW (and O_NONBLOCK, so a FIFO put in a file's place cannot hang the reader),
each name is unlinked or removed relative to its parent's descriptor. A directory swapped for a
symlink after it was listed fails to open (ELOOP/ENOTDIR) and is skipped, a directory swapped
for another one after it was listed is skipped too (its stat differs), and a directory already
open stays the one that was listed, wherever it is moved: nothing outside the tree is reached.
Symlinks inside are entries like files: reported, unlinked, never followed.

The base a tree hangs from (a storage directory named by configuration) is resolved once, then
opened one component at a time from `/` without following links, so a link put into the path
after it was resolved makes the open fail instead of leading elsewhere.

Depth is bounded: walks do not go below MAX_DEPTH levels (one descriptor is held per level), and
removal moves what lies deeper up under the directory being removed, so a tree nested 100,000
levels deep is still removed with at most MAX_DEPTH descriptors and frames.

Stdlib only: used by the master, and through `paths.remove_under` by the Core API.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("dettui.dirfd")

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_DEPTH = 64  # directory levels a walk enters (and descriptors a removal holds)
MAX_PASSES = 1000  # rounds of a removal whose tree keeps changing under it
# errors that say "not (or no longer) what was listed": skip it, never fatal
GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO})

Walked = tuple[str, int, list[os.DirEntry[str]], list[os.DirEntry[str]]]


def open_path(path: Path | str) -> int:
    """A descriptor of the directory at `path` (resolved once, then opened component by
    component without following links). OSError if it is not (or no longer) there."""
    resolved = Path(path).resolve()
    fd = os.open("/", DIR_FLAGS)
    try:
        for part in resolved.parts[1:]:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def opened(path: Path | str) -> Iterator[int]:
    """`open_path` as a context manager that closes the descriptor."""
    fd = open_path(path)
    try:
        yield fd
    finally:
        os.close(fd)


def make_under(base: Path | str, names: list[str] | tuple[str, ...], mode: int = 0o755) -> None:
    """`base/names[0]/names[1]/...` made where missing, each level made and opened from its
    parent's descriptor without following links (`mkdir -p` that a link planted on the way
    cannot lead out of `base`). OSError where a level is a link or not a directory."""
    fd = open_path(base)
    try:
        for name in names:
            if not name or name in (".", "..") or "/" in name:
                raise OSError(errno.EINVAL, f"not a directory name: {name!r}")
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
            child = open_dir(fd, name)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def open_dir(dir_fd: int, name: str) -> int:
    """The directory `name` inside `dir_fd` (one component, never a symlink)."""
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def open_file(dir_fd: int, name: str) -> int:
    """The file `name` inside `dir_fd` for reading (one component, never a symlink, never
    blocking on a FIFO). Check its kind with os.fstat: it may be anything but a link."""
    return os.open(name, FILE_FLAGS, dir_fd=dir_fd)


def walk(fd: int, rel: str = "", depth: int = 0) -> Iterator[Walked]:
    """Top-down over the tree under the open directory `fd`: (rel, dir_fd, dirs, others) per
    directory, `rel` its path from the top ('' or ending in '/'), entries sorted by name, dirs
    real directories only (symlinks are among the others). The entries' lazy stat and the
    descriptor are valid until the next step. Removing an entry from `dirs` skips it."""
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    dirs = [e for e in entries if _is_dir(e)]
    others = [e for e in entries if not _is_dir(e)]
    yield rel, fd, dirs, others
    if dirs and depth + 1 >= MAX_DEPTH:
        log.warning("not walking below %s%s: deeper than %d levels", rel, dirs[0].name,
                    MAX_DEPTH)
        return
    for entry in dirs:
        child = _descend(fd, entry)
        if child is None:
            continue
        try:
            yield from walk(child, f"{rel}{entry.name}/", depth + 1)
        finally:
            os.close(child)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _descend(fd: int, entry: os.DirEntry[str]) -> int | None:
    """The listed directory `entry`, opened, if it is still that directory."""
    try:
        listed = entry.stat(follow_symlinks=False)
        child = open_dir(fd, entry.name)
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise
    if os.path.samestat(listed, os.fstat(child)):
        return child
    os.close(child)  # replaced by another directory since it was listed
    return None


def remove(dir_fd: int, name: str) -> bool:
    """Remove the entry `name` inside `dir_fd`: a file or a symlink itself, or a directory and
    everything under it, never following a link. False if there was nothing there. Best effort
    like `rm -rf`: what cannot be removed is logged and left."""
    for _ in range(3):  # a name swapped between a directory and a file while we look
        try:
            top = open_dir(dir_fd, name)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return False
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            if _unlink(dir_fd, name):
                return True
            continue
        try:
            _remove_dir(dir_fd, name, top)
        finally:
            os.close(top)
        return True
    log.warning("could not remove %r: it keeps changing between a file and a directory", name)
    return True


def _unlink(dir_fd: int, name: str) -> bool:
    """Unlink `name`; False if it is a directory (again)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except IsADirectoryError:
        return False
    except FileNotFoundError:
        pass
    return True


def _remove_dir(dir_fd: int, name: str, top: int) -> None:
    """Empty the open directory `top` (named `name` in `dir_fd`), then remove it."""
    for _ in range(MAX_PASSES):
        _empty(top, top, 1)
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                log.warning("could not remove %r: %s", name, exc)
                return
    log.warning("could not remove %r: it kept filling while it was removed", name)


def _empty(fd: int, top: int, depth: int) -> None:
    """Remove what the directory `fd` holds. Directories at MAX_DEPTH are moved up into `top`
    instead (under a fresh hidden name), for the next pass of `_remove_dir`."""
    with os.scandir(fd) as it:
        entries = list(it)
    for entry in entries:
        try:
            if not _is_dir(entry) and _unlink(fd, entry.name):
                continue
            if depth >= MAX_DEPTH:
                os.rename(entry.name, f".dettui-rm-{secrets.token_hex(8)}", src_dir_fd=fd,
                          dst_dir_fd=top)
                continue
            child = open_dir(fd, entry.name)
        except OSError as exc:
            if exc.errno not in GONE:
                log.warning("could not remove %r: %s", entry.name, exc)
            continue
        try:
            _empty(child, top, depth + 1)
        finally:
            os.close(child)
        with contextlib.suppress(OSError):  # not empty (yet): the next pass
            os.rmdir(entry.name, dir_fd=fd)


def is_regular(fd: int) -> os.stat_result | None:
    """The stat of the open file `fd` if it is a regular file, else None."""
    st = os.fstat(fd)
    return st if stat.S_ISREG(st.st_mode) else None
