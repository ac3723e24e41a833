"""Paths derived from input: the one helper that turns a name from a request, a config, a message
or an environment variable into a filesystem path.

A name is one path component; the result is resolved and must lie strictly under its base, so
an absolute name, `..`, a separator or a symlink pointing out of the base is refused rather
than followed. Checkpoint uuids are UUIDs (as Determined's are), checked where they enter.

Stdlib only: used by the master, the agent and the Core API inside training processes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from dettui import dirfd
from dettui.errors import InvalidArgument

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_NAME = 255  # bytes of one path component (NAME_MAX on Linux)


class PathEscape(InvalidArgument):
    """A name that would leave its base directory."""


def checkpoint_uuid(value: object, where: str = "uuid") -> str:
    """`value` if it is a UUID in canonical form (lowercase, hyphenated), else InvalidArgument."""
    if isinstance(value, str) and _UUID.fullmatch(value):
        return value
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise InvalidArgument(f"{where}: a checkpoint uuid must be a UUID such as "
                          f"'0b6e7c5e-3a1f-4d2b-9c1e-2f8a4b6d9e01', got {shown}")


def component(name: object, where: str = "name") -> str:
    """`name` if it is usable as one path component: no separator, not `.`/`..`, no NUL."""
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name
            or (os.altsep is not None and os.altsep in name)
            or len(name.encode("utf-8", "surrogateescape")) > MAX_NAME):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise PathEscape(f"{where}: {shown} is not a valid file name (one path component, "
                         "no '/', not '.' or '..')")
    return name


def confined(base: Path | str, *names: str, where: str = "name") -> Path:
    """`base/names...`, resolved, checked to lie strictly under the resolved base."""
    root = Path(base).resolve()
    for name in names:
        component(name, where)
    path = root.joinpath(*names).resolve()
    if path == root or not path.is_relative_to(root):
        raise PathEscape(f"{where}: {'/'.join(names)!r} leads out of {root}")
    return path


def remove_under(base: Path | str, name: str, where: str = "name") -> bool:
    """Remove the entry `name` directly under `base` (a tree, a file, or a symlink itself, never
    what a symlink points to, even one swapped in while the tree is removed: dirfd's removal,
    through directory descriptors). False if there was nothing to remove."""
    component(name, where)
    try:
        base_fd = dirfd.open_path(base)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        return dirfd.remove(base_fd, name)
    finally:
        os.close(base_fd)


def exposure(path: Path | str, hidden: Iterable[Path | str],
             exposed: Iterable[Path | str] = ()) -> str | None:
    """Why `path` may not be shown to a trial, or None if it may: it must not be or hold a
    `hidden` path (a state dir, the agent's secrets, other allocations' work), nor lie inside
    one, unless inside one of `exposed` (the master's own checkpoint root in its state dir)."""
    p = Path(path).resolve()
    roots = [Path(h).resolve() for h in hidden]
    for h in roots:
        if h.is_relative_to(p):
            return f"{p} holds {h}, which trials must not see"
    if any(p.is_relative_to(Path(e).resolve()) for e in exposed):
        return None
    for h in roots:
        if p.is_relative_to(h):
            return f"{p} lies inside {h}, which trials must not see"
    return None
