"""A checkpoint's files out of storage as a tar.gz stream (Determined's `GET /checkpoints/
{uuid}`, which the SDK uses when it cannot reach the storage itself), and their removal."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

from aiohttp import web

from dettui.errors import NotFound
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
