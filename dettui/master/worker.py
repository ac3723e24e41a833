"""A worker process of the master (`python -m dettui.master.worker`): runs CPU-heavy calls sent
by `offload.isolated`, one at a time, so that they hold this process's GIL, not the master's.

Frames on stdin and stdout: an 8-byte big-endian length, then a pickle. A request is
`(function, args, kwargs)`; the answer `(True, result)` or `(False, exception)`. The worker dies
with the master: PR_SET_PDEATHSIG first thing, and it exits when its stdin closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal

if __name__ == "__main__":  # as the worker: armed before anything else is imported
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

import importlib  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
from typing import BinaryIO  # noqa: E402

HEADER = struct.Struct(">Q")


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


def write_chunks(stream: BinaryIO, chunks: list[bytes]) -> None:
    """One frame made of `chunks`, written one by one (never joined)."""
    stream.write(HEADER.pack(sum(len(c) for c in chunks)))
    for chunk in chunks:
        stream.write(chunk)
    stream.flush()


def answer(request: bytes, stdin: BinaryIO) -> bytes:
    """Run one request; one with a body (`offload.isolated_body`) reads it from the next frame
    and gets it as its first argument."""
    try:
        fn, args, kwargs, with_body = pickle.loads(request)
        if with_body:
            body = read_frame(stdin)
            if body is None:
                os._exit(0)  # the master went away mid-request
            args = (body, *args)
        return pickle.dumps((True, fn(*args, **kwargs)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - every error goes back to the caller
        try:
            return pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an error that cannot be pickled
            return pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the master's to handle
    for name in sys.argv[1:]:
        importlib.import_module(name)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the frames
    write_frame(stdout, b"ready")
    while (request := read_frame(stdin)) is not None:
        write_frame(stdout, answer(request, stdin))
    os._exit(0)


if __name__ == "__main__":
    main()
