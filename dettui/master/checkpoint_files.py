"""A checkpoint's files out of storage as a tar.gz stream (Determined's `GET /checkpoints/
{uuid}`, which the SDK uses when it cannot reach the storage itself), and the removal of those
matching globs (`POST /api/v1/checkpoints/rm`)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import gzip
import logging
import os
import shutil
import stat
import tarfile
from pathlib import Path
from typing import Any

from aiohttp import web

from dettui.errors import InvalidArgument, NotFound
from dettui.paths import confined
from dettui.storage import storage_base

log = logging.getLogger("dettui.master")
CHUNK = 1 << 20
QUEUE = 8  # chunks in flight between the packing thread and the response


def directory(config: dict[str, Any], uuid: str) -> Path:
    """The checkpoint's directory under the experiment's storage base (confined to it)."""
    path = confined(storage_base(config), uuid, where="uuid")
    if not path.is_dir():
        raise NotFound(f"the files of checkpoint {uuid} are not in its storage ({path.parent})")
    return path


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


def pack(root: Path, sink: Any) -> None:
    """Regular files and directories under `root`, names relative to it; symlinks, devices
    and FIFOs are left out (a link could point anywhere on the master's machine)."""
    try:
        # gzip level 1: weights barely compress, and level 9 only costs the master CPU
        with gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=1) as gz, \
                tarfile.open(fileobj=gz, mode="w|") as tar:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for name in sorted(dirnames) + sorted(filenames):
                    path = Path(dirpath) / name
                    st = path.lstat()
                    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                        tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    finally:
        sink.close()


async def stream(request: web.Request, root: Path, uuid: str) -> web.StreamResponse:
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


def listing(root: Path) -> dict[str, str]:
    """The checkpoint's resources as Determined lists them (`d/`: "0", files: size), symlinks
    neither followed nor measured beyond themselves."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in dirnames:
            out[(base / name).relative_to(root).as_posix() + "/"] = "0"
        for name in filenames:
            out[(base / name).relative_to(root).as_posix()] = str((base / name).lstat().st_size)
    return dict(sorted(out.items()))


def remove_matching(root: Path, globs: list[str]) -> dict[str, str]:
    """Remove what `globs` match in the checkpoint directory `root`; the resources left (none:
    the directory goes too). Nothing outside `root` is reached: symlinks are removed, never
    followed, and the walk does not enter them."""
    if not root.is_dir():
        return {}
    if FULL_DELETE in globs:
        shutil.rmtree(root, ignore_errors=True)
        return {}
    doomed = [rel for rel in listing(root) if any(glob_match(g, rel) for g in globs)]
    for rel in sorted(doomed, key=lambda r: r.count("/"), reverse=True):
        path = root / rel.rstrip("/")
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    left = listing(root)
    if not left:
        shutil.rmtree(root, ignore_errors=True)
    return left
