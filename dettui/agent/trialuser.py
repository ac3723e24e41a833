"""The Unix user a trial runs as, and what that user can reach on this machine.

As Slurm runs a job as the user who submitted it, and Determined runs a task as its owner's
linked agent user (`det user link-with-agent-user`), a trial on a root agent runs as its owner's
linked Unix user; an unlinked owner's trials run as the agent's default trial user
(`dettui agent --trial-user NAME`); unless told otherwise, each unlinked dettui user's trials
run as a uid of that user's own, with no account behind it (PER_USER_BASE + the user's id, the
same on every agent): a shared account such as `nobody` would let one unlinked user's trial read
and fill another's checkpoints and use up their shared process limit. Root only when an admin
linked the owner to root, or the agent was started with `--trial-user root`, explicitly.

`unreachable` tells which directory on the way to a path a user cannot pass (by mode bits, as
the kernel checks them for a process without capabilities): the sandbox covers such a
directory with an empty tmpfs and binds back only what the trial needs inside it (its work
dir, its checkpoint storage, the Python that runs it), and the agent names the path and the
user when something a trial needs stays out of reach. `unswappable` tells whether a path a
user named (a venv) is one no user could make name something else between the agent's check
and the sandbox's bind: only such a path may be bound back under a covered directory.
`pin` records what a directory is when the agent checks it (its real path and identity), for
storage that a user can swap: the sandbox refuses a bind that is not that directory.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from dettui.errors import InvalidArgument
from dettui.protocol import AgentUser

PER_USER = "per-user"  # the default: each unlinked dettui user gets a uid of its own
PER_USER_BASE = 2_000_000_000  # + the dettui user's id: far above any account or subuid range


@dataclass(frozen=True)
class TrialUser:
    uid: int
    gid: int
    name: str
    groups: tuple[int, ...] = ()  # supplementary groups, as `initgroups` gives them
    home: str = ""

    @property
    def root(self) -> bool:
        return self.uid == 0

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid}, gid {self.gid})"


def named(name: str) -> TrialUser:
    """The user called `name` (or with that numeric id) on this machine."""
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"trial user {name!r}: no such user on this machine") from exc
    return _of(entry)


def per_user(owner_id: int) -> TrialUser:
    """The uid of an unlinked dettui user's trials: its own, with no account behind it."""
    uid = PER_USER_BASE + max(0, owner_id)
    return TrialUser(uid, uid, f"dettui-{owner_id}")


def _of(entry: pwd.struct_passwd, gid: int | None = None) -> TrialUser:
    gid = entry.pw_gid if gid is None else gid
    try:
        groups = tuple(g for g in os.getgrouplist(entry.pw_name, gid) if g != gid)
    except OSError:
        groups = ()
    return TrialUser(entry.pw_uid, gid, entry.pw_name, groups, entry.pw_dir)


def linked(link: AgentUser | None, default: TrialUser) -> TrialUser:
    """The user a trial runs as: its owner's linked agent user, else `default`. A name is
    looked up on this machine; a bare uid that has no entry here runs with that uid and gid
    and no supplementary groups."""
    if link is None or (link.uid is None and not link.user):
        return default
    gid = link.gid
    if link.group:
        try:
            gid = grp.getgrnam(link.group).gr_gid
        except KeyError as exc:
            raise InvalidArgument(f"the owner's linked agent group {link.group!r} does not "
                                  "exist on this machine") from exc
    if link.user:
        try:
            entry = pwd.getpwnam(link.user)
        except KeyError as exc:
            raise InvalidArgument(f"the owner's linked agent user {link.user!r} does not exist "
                                  "on this machine") from exc
        if link.uid is not None and link.uid != entry.pw_uid:
            raise InvalidArgument(f"the owner's linked agent user {link.user!r} has uid "
                                  f"{entry.pw_uid} here, not {link.uid}")
        return _of(entry, gid)
    assert link.uid is not None
    try:
        return _of(pwd.getpwuid(link.uid), gid)
    except KeyError:
        return TrialUser(link.uid, link.uid if gid is None else gid, str(link.uid))


def _passes(st: os.stat_result, user: TrialUser, bit: int) -> bool:
    """Whether `user`, without capabilities, has permission `bit` (an S_IXOTH-style bit: 1, 2
    or 4) on a file of this status."""
    if user.uid == st.st_uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid == user.gid or st.st_gid in user.groups:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def unreachable(path: Path, user: TrialUser) -> Path | None:
    """The first directory on the way to `path` (itself included when it is a directory)
    that `user` cannot pass, or None. Symbolic links are followed as the kernel would."""
    path = Path(os.path.abspath(path))
    current = Path("/")
    for part in (*path.parts[1:], None):
        try:
            st = current.stat()
        except OSError:
            return None  # what does not exist is the trial's own error to see
        if stat.S_ISDIR(st.st_mode) and not _passes(st, user, 1):
            return current
        if part is None:
            return None
        nxt = current / part
        if nxt.is_symlink():
            found = unreachable(nxt.resolve(), user)
            if found is not None:
                return found
            current = nxt.resolve()
        else:
            current = nxt
    return None


def readable(path: Path, user: TrialUser) -> bool:
    """Whether `user` may read `path` (a file) or list it (a directory), given it can reach it."""
    try:
        return _passes(path.stat(), user, 4)
    except OSError:
        return False


def unswappable(path: Path) -> bool:
    """Whether no user but root and this agent's can change what `path` (absolute, resolved)
    names: it and every directory above it are directories (not links) owned by root or this
    agent's user, writable by neither group nor others. (A sticky /tmp is writable by others:
    a user could not swap root's entries there, but neither would root name a venv there.)"""
    if not path.is_absolute():
        return False
    for p in (path, *path.parents):
        try:
            st = os.lstat(p)
        except OSError:
            return False
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid())
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            return False
    return True


@dataclass(frozen=True)
class Pinned:
    """A directory as the agent checked it: `path`, the kernel's name of it then (absolute, no
    link on the way), and `identity` ("st_dev:st_ino"). The sandbox binds exactly `path`
    and, since a bind mount keeps its source's device and inode, refuses the trial when what
    it bound is another directory (a user's link or directory swapped after the check)."""

    path: Path
    identity: str


def pin(path: Path) -> Pinned | None:
    """The directory `path` names now, by one open (links followed once, by the kernel): its
    real path and identity, or None when it is no directory. Check the returned `path`, never
    `path` again: a link resolved twice may name two directories."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)
    if not real.startswith("/") or real.endswith(" (deleted)"):
        return None
    return Pinned(Path(real), f"{st.st_dev}:{st.st_ino}")
