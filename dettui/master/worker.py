"""A worker process of the master (`python -m dettui.master.worker`): runs CPU-heavy calls sent
by `offload.isolated`, one at a time, so that they hold this process's GIL, not the master's.

Frames on stdin and stdout: an 8-byte big-endian length, then a pickle. A request is
`(function, args, kwargs)`; the answer `(True, result)` or `(False, exception)`. The worker dies
with the master: its parent-death signal is armed before Python starts (`setpriv`, see
`dettui.lifeline`) or first thing here, after which a worker whose master died already ends at
once; and it exits when its stdin closes. Arguments: the master's pid, then modules to import.
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
import pickle  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
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
    for name in sys.argv[2:]:
        importlib.import_module(name)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the frames
    write_frame(stdout, b"ready")
    while (request := read_frame(stdin)) is not None:
        write_frame(stdout, answer(request, stdin))
    os._exit(0)


if __name__ == "__main__":
    main()
