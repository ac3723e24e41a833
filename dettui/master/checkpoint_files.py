"""A checkpoint's files out of storage as a tar.gz stream (Determined's `GET /checkpoints/
{uuid}`, which the SDK uses when it cannot reach the storage itself), and the removal of those
matching globs (`POST /api/v1/checkpoints/rm`).

The master runs as root and trials, as unprivileged users, write these directories and can
rename and relink inside them while the master reads or deletes: every access goes through
`opened` (the checkpoint's directory, opened from the storage base without following a link)
and dirfd's walk, opens and removals relative to directory descriptors, never by a path a
swapped parent could redirect. Symlinks inside a checkpoint are archived as links and removed
as links, never followed; devices, FIFOs and sockets are left out."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fnmatch
import grp
import gzip
import logging
import os
import pwd
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from dettui import dirfd
from dettui.errors import InvalidArgument, NotFound
from dettui.paths import component, remove_under
from dettui.storage import storage_base

log = logging.getLogger("dettui.master")
CHUNK = 1 << 20
QUEUE = 8  # chunks in flight between the packing thread and the response


@dataclass(frozen=True)
class Location:
    """A checkpoint's directory: the entry `uuid` (one component) directly under `base`."""

    base: Path
    uuid: str


def located(config: dict[str, Any], uuid: str) -> Location:
    """Where the checkpoint `uuid` lies in the experiment's storage (nothing is opened)."""
    return Location(storage_base(config), component(uuid, "uuid"))


@contextlib.contextmanager
def opened(where: Location) -> Iterator[int]:
    """The checkpoint's own directory, opened from its storage base (itself opened component
    by component) with O_NOFOLLOW: a symlink in its place, or in the base's path since it was
    resolved, is an OSError, never followed. The one way in for every reader and remover."""
    with dirfd.opened(where.base) as base:
        fd = dirfd.open_dir(base, where.uuid)
        try:
            yield fd
        finally:
            os.close(fd)


def directory(config: dict[str, Any], uuid: str) -> Location:
    """The checkpoint's directory in the experiment's storage; NotFound unless it is one."""
    where = located(config, uuid)
    try:
        with opened(where):
            pass
    except OSError as exc:
        raise NotFound(f"the files of checkpoint {uuid} are not in its storage "
                       f"({where.base})") from exc
    return where


def remove(where: Location) -> bool:
    """The checkpoint's directory out of storage (a symlink in its place is removed itself);
    False if there was nothing to remove."""
    return remove_under(where.base, where.uuid, "uuid")


class _Pipe:
    """A file-like sink for tarfile on a thread, feeding an asyncio queue (with backpressure)."""

    def __init__(self, queue: asyncio.Queue[bytes | None],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.queue, self.loop, self.buffer = queue, loop, bytearray()

    def write(self, data: bytes) -> int:
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buffer:
            chunk, self.buffer = bytes(self.buffer), bytearray()
            asyncio.run_coroutine_threadsafe(self.queue.put(chunk), self.loop).result()

    def close(self) -> None:
        self.flush()
        asyncio.run_coroutine_threadsafe(self.queue.put(None), self.loop).result()


def pack(where: Location, sink: Any) -> None:
    """Directories, regular files and symlinks (as links, those that stay inside) of the
    checkpoint, names relative to its directory, in os.walk's order; devices, FIFOs and sockets
    are left out."""
    try:
        # gzip level 1: weights barely compress, and level 9 only costs the master CPU
        with opened(where) as top, \
                gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=1) as gz, \
                tarfile.open(fileobj=gz, mode="w|") as tar:
            members = _Members(tar)
            for rel, fd, dirs, others in dirfd.walk(top):
                for entry in dirs:
                    members.add_dir(rel + entry.name, entry)
                for entry in others:
                    members.add_other(fd, rel + entry.name, entry)
    finally:
        sink.close()


def _within(arcname: str, target: str) -> bool:
    """Whether a link at `arcname` to `target` stays inside the checkpoint. Links out of it are
    left out of the archive, as before links were archived: the downloader's extractor
    refuses them (Python's data filter), and what they name is not the checkpoint's."""
    if not target or os.path.isabs(target):
        return False
    path = os.path.normpath(os.path.join(os.path.dirname(arcname), target))
    return path != ".." and not path.startswith("../")


class _Members:
    """Tar members made from what was opened (tarfile's own `add` opens by path), with
    `gettarinfo`'s fields: hard links within the checkpoint stored once, owner names."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.names: dict[tuple[str, int], str] = {}

    def add_dir(self, arcname: str, entry: os.DirEntry[str]) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.tar.addfile(self._info(arcname, entry.stat(follow_symlinks=False)))

    def add_other(self, fd: int, arcname: str, entry: os.DirEntry[str]) -> None:
        try:
            if entry.is_symlink():
                target = os.readlink(entry.name, dir_fd=fd)
                if _within(arcname, target):
                    st = entry.stat(follow_symlinks=False)
                    self.tar.addfile(self._info(arcname, st, target))
                return
            if not entry.is_file(follow_symlinks=False):
                return
            f = dirfd.open_file(fd, entry.name)
        except OSError as exc:  # gone or changed kind since it was listed: left out
            if exc.errno in dirfd.GONE or exc.errno == errno.EINVAL:
                return
            raise
        try:
            st = dirfd.is_regular(f)  # a FIFO or a directory swapped in: left out
            if st is not None:
                with open(f, "rb", buffering=0, closefd=False) as fileobj:
                    self.tar.addfile(self._info(arcname, st), fileobj)
        finally:
            os.close(f)

    def _info(self, arcname: str, st: os.stat_result, linkname: str = "") -> tarfile.TarInfo:
        info = self.tar.tarinfo(arcname)
        info.mode, info.uid, info.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        info.mtime, info.linkname = st.st_mtime, linkname
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
        elif stat.S_ISLNK(st.st_mode):
            info.type = tarfile.SYMTYPE
        elif st.st_nlink > 1 and (st.st_ino, st.st_dev) in self.tar.inodes:
            info.type, info.linkname = tarfile.LNKTYPE, self.tar.inodes[(st.st_ino, st.st_dev)]
        else:
            info.type, info.size = tarfile.REGTYPE, st.st_size
            if st.st_nlink > 1:
                self.tar.inodes[(st.st_ino, st.st_dev)] = arcname
        info.uname = self._name("u", st.st_uid)
        info.gname = self._name("g", st.st_gid)
        return info

    def _name(self, kind: str, num: int) -> str:
        if (kind, num) not in self.names:
            try:
                name = pwd.getpwuid(num).pw_name if kind == "u" else grp.getgrgid(num).gr_name
            except KeyError:
                name = ""
            self.names[(kind, num)] = name
        return self.names[(kind, num)]


async def stream(request: web.Request, root: Location, uuid: str) -> web.StreamResponse:
    resp = web.StreamResponse(headers={
        "Content-Type": "application/gzip",
        "Content-Disposition": f'attachment; filename="{uuid}.tar.gz"'})
    await resp.prepare(request)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE)
    packer = asyncio.create_task(asyncio.to_thread(pack, root, _Pipe(
        queue, asyncio.get_running_loop())))
    try:
        while (chunk := await queue.get()) is not None:
            await resp.write(chunk)
    finally:
        while not packer.done():  # the client went away: drain so the thread can finish
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            await asyncio.sleep(0.01)
    try:
        packer.result()
    except OSError as exc:  # a file vanished mid-way (GC): the archive stops short
        log.warning("checkpoint %s: streaming stopped: %s", uuid, exc)
        return resp
    await resp.write_eof()
    return resp


FULL_DELETE = "**/*"  # Determined's glob for "everything"
MAX_GLOBS = 100
MAX_GLOB = 1000  # characters
MAX_STARS = 4  # `**` components in one glob


def check_globs(globs: list[str]) -> list[str]:
    """Determined's rules (no empty glob, no `..`) and dettui's caps; InvalidArgument."""
    if len(globs) > MAX_GLOBS:
        raise InvalidArgument(f"checkpointGlobs: at most {MAX_GLOBS}")
    for g in globs:
        if not g:
            raise InvalidArgument("cannot have empty string glob")
        if ".." in g:
            raise InvalidArgument(f"glob '{g}' cannot contain '..'")
        if len(g) > MAX_GLOB or "\0" in g or g.split("/").count("**") > MAX_STARS:
            raise InvalidArgument(f"glob {g[:50]!r}...: at most {MAX_GLOB} characters and "
                                  f"{MAX_STARS} `**`, no NUL")
    return globs


def glob_match(pattern: str, rel: str) -> bool:
    """Whether the path `rel` (relative, `/`-separated) matches `pattern` as Python's
    `glob.glob(pattern, recursive=True)` would find it: `*`, `?` and `[...]` within one
    component, `**` for any number of components, hidden names only by a pattern that starts
    with a dot; directories are given with a trailing `/`. Pure: nothing is read from the
    file system."""
    if pattern.endswith("/") and not rel.endswith("/"):
        return False  # `d/` matches directories only
    parts = [p for p in pattern.split("/") if p]
    return _match(parts, [p for p in rel.split("/") if p])


def _match(pattern: list[str], path: list[str]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        for i in range(len(path) + 1):
            if _match(rest, path[i:]):
                return True
            if i < len(path) and path[i].startswith("."):
                return False  # `**` does not walk into hidden names
        return False
    if not path or (path[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(path[0], head) and _match(rest, path[1:])


def listing(top: int) -> dict[str, str]:
    """The resources of the checkpoint directory open as `top`, as Determined lists them (`d/`:
    "0", files: size), symlinks neither followed nor measured beyond themselves."""
    out: dict[str, str] = {}
    for rel, _fd, dirs, others in dirfd.walk(top):
        for entry in dirs:
            out[f"{rel}{entry.name}/"] = "0"
        for entry in others:
            with contextlib.suppress(FileNotFoundError):
                out[rel + entry.name] = str(entry.stat(follow_symlinks=False).st_size)
    return dict(sorted(out.items()))


def remove_matching(where: Location, globs: list[str]) -> dict[str, str]:
    """Remove what `globs` match in the checkpoint's directory; the resources left (none: the
    directory goes too). Nothing outside it is reached: what is removed is removed through the
    descriptor of the directory it was listed in, symlinks are removed, never followed, and the
    walk does not enter them."""
    try:
        with opened(where) as top:
            if FULL_DELETE in globs:
                left: dict[str, str] = {}
            else:
                _remove_matches(top, globs)
                left = listing(top)
    except OSError as exc:
        if exc.errno in dirfd.GONE:
            return {}
        raise
    if not left:
        remove(where)
    return left


def _remove_matches(top: int, globs: list[str]) -> None:
    for rel, fd, dirs, others in dirfd.walk(top):
        for entry in others:
            if any(glob_match(g, rel + entry.name) for g in globs):
                _remove_logged(fd, rel + entry.name)
        for entry in list(dirs):
            if any(glob_match(g, f"{rel}{entry.name}/") for g in globs):
                dirs.remove(entry)  # gone whole: not walked into
                _remove_logged(fd, rel + entry.name)


def _remove_logged(fd: int, rel: str) -> None:
    try:
        dirfd.remove(fd, rel.rsplit("/", 1)[-1])
    except OSError as exc:
        log.warning("could not remove %s from a checkpoint: %s", rel, exc)
