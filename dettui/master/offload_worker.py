"""A worker process of the master (`python -m dettui.master.offload_worker`): runs CPU-heavy
calls sent by `offload.isolated`, one at a time, so that they hold this process's GIL, not the
master's.

Frames on stdin and stdout: an 8-byte big-endian length, then the bytes. A request is a pickle
of `(function, args, kwargs, with_body)`; with a body, the body follows in frames of its chunks
as the master receives them, ended by an empty frame. The answer is a pickle of `(True, result)`
or `(False, exception)`, preceded by how many buffers follow it: a bytes object of BIG or more
in the result (a 95 MiB context) goes in a frame of its own after the pickle (a persistent id
in it), so the master reads it straight into the bytes object it keeps rather than into a
pickle it then copies it out of.

The worker dies with the master: its parent-death signal is armed before Python starts
(`setpriv`, see `dettui.lifeline`) or first thing here, after which a worker whose master died
already ends at once; and it exits when its stdin closes. Arguments: the master's pid, then
modules to import.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # as the worker: armed before anything else is imported
    from dettui.lifeline import die_with_parent, orphaned

    die_with_parent()
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or orphaned(int(sys.argv[1])):
        os._exit(0)  # the master died before the signal was armed

import importlib  # noqa: E402
import io  # noqa: E402
import pickle  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
from typing import BinaryIO  # noqa: E402

HEADER = struct.Struct(">Q")
BIG = 1024 * 1024  # bytes: a bytes object this long or longer is answered out of band


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    data = stream.read(size)
    return data if len(data) == size else None


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def write_chunk(stream: BinaryIO, chunk: bytes) -> None:
    """One frame of a body (not flushed); a body ends with `end_chunks`."""
    stream.write(HEADER.pack(len(chunk)))
    stream.write(chunk)


def end_chunks(stream: BinaryIO) -> None:
    stream.write(HEADER.pack(0))
    stream.flush()


def read_chunks(stream: BinaryIO) -> bytes | None:
    """A body sent with `write_chunk`, whole; None if the stream ended first."""
    chunks = []
    while (chunk := read_frame(stream)):
        chunks.append(chunk)
    if chunk is None:
        return None
    body = b"".join(chunks)
    chunks.clear()
    return body


class _Pickler(pickle.Pickler):
    """Large bytes objects out of the pickle, into `buffers` (persistent ids: the pickler
    calls `persistent_id` for every object, bytes too, as it does not `reducer_override`)."""

    def __init__(self, file: BinaryIO, buffers: list[bytes]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.buffers = buffers

    def persistent_id(self, obj: object) -> int | None:
        if type(obj) is bytes and len(obj) >= BIG:
            self.buffers.append(obj)
            return len(self.buffers) - 1
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: memoryview, buffers: list[bytes]) -> None:
        super().__init__(io.BytesIO(data))
        self.buffers = buffers

    def persistent_load(self, pid: object) -> bytes:
        if not isinstance(pid, int) or not 0 <= pid < len(self.buffers):
            raise pickle.UnpicklingError(f"no buffer {pid!r} came with the answer")
        return self.buffers[pid]


def dumps(value: object) -> tuple[bytes, list[bytes]]:
    """`value` pickled, with its large bytes objects as buffers of their own."""
    buffers: list[bytes] = []
    out = io.BytesIO()
    _Pickler(out, buffers).dump(value)
    return out.getvalue(), buffers


def write_answer(stream: BinaryIO, data: bytes, buffers: list[bytes]) -> None:
    """An answer `dumps` made."""
    write_frame(stream, HEADER.pack(len(buffers)) + data)
    for buffer in buffers:
        stream.write(HEADER.pack(len(buffer)))
        stream.write(buffer)
    stream.flush()


def read_answer(stream: BinaryIO) -> object | None:
    """What `write_answer` wrote, unpickled (None: the stream ended first)."""
    head = read_frame(stream)
    if head is None or len(head) < HEADER.size:
        return None
    (count,) = HEADER.unpack_from(head)
    buffers = []
    for _ in range(count):
        if (buffer := read_frame(stream)) is None:
            return None
        buffers.append(buffer)
    return _Unpickler(memoryview(head)[HEADER.size:], buffers).load()


def answer(request: bytes, stdin: BinaryIO) -> tuple[bool, object]:
    """Run one request; one with a body (`offload.isolated_body`) reads it from the frames that
    follow and gets it as its first argument."""
    try:
        fn, args, kwargs, with_body = pickle.loads(request)
        if with_body:
            body = read_chunks(stdin)
            if body is None:
                os._exit(0)  # the master went away, or let this worker go, mid-body
            args = (body, *args)
            del body
        return (True, fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - every error goes back to the caller
        return (False, exc)


def _reply(stdout: BinaryIO, value: tuple[bool, object]) -> None:
    try:
        data, buffers = dumps(value)
    except Exception as exc:  # noqa: BLE001 - a result or an error that cannot be pickled
        ok, got = value
        error = exc if ok else got
        try:
            data, buffers = dumps((False, error))
        except Exception:  # noqa: BLE001
            data, buffers = dumps((False, RuntimeError(f"{type(error).__name__}: {error}")))
    write_answer(stdout, data, buffers)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the master's to handle
    for name in sys.argv[2:]:
        importlib.import_module(name)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the frames
    write_frame(stdout, b"ready")
    while (request := read_frame(stdin)) is not None:
        _reply(stdout, answer(request, stdin))
    os._exit(0)


if __name__ == "__main__":
    main()
