"""Work in the master's worker processes: results and errors come back whole, a worker that
dies is replaced, and the workers are other processes than the master."""

from __future__ import annotations

import os

import pytest

from dettui.errors import InvalidArgument, TooLarge
from dettui.master import offload
from dettui.paths import checkpoint_uuid


async def test_results_and_errors_come_back() -> None:
    assert await offload.isolated(os.getpid) != os.getpid()
    assert await offload.isolated(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
    with pytest.raises(InvalidArgument, match="must be a UUID"):
        await offload.isolated(checkpoint_uuid, "../../etc", "uuid")
    with pytest.raises(ValueError, match="invalid literal"):
        await offload.isolated(int, "x")


async def test_a_worker_that_dies_is_replaced() -> None:
    with pytest.raises(TooLarge, match="died"):
        await offload.isolated(os._exit, 3)
    pids = {await offload.isolated(os.getpid) for _ in range(6)}
    assert pids and os.getpid() not in pids
    assert await offload.isolated(len, b"x" * 10_000_000) == 10_000_000


def _sized(body: bytes, tail: str) -> str:
    return f"{len(body)}:{body[:3].decode()}..{body[-3:].decode()}:{tail}"


async def test_a_body_goes_down_in_its_chunks_and_arrives_whole() -> None:
    chunks = [b"abc" + b"x" * (1 << 20), b"", b"y" * 12345 + b"xyz"]
    assert await offload.isolated_body(_sized, chunks, "t") == f"{(1 << 20) + 12351}:abc..xyz:t"
    assert chunks == []  # sent, then let go: the master does not hold a body while it is read
    assert await offload.isolated_body(_sized, [], "empty") == "0:..:empty"
    with pytest.raises(InvalidArgument, match="must be a UUID"):  # the body was consumed
        await offload.isolated_body(checkpoint_uuid, [b"body"], "uuid")
    for _ in range(offload.PROCESSES + 1):  # every worker is still in step with its pipe
        assert await offload.isolated(sorted, [2, 1]) == [1, 2]


def test_a_worker_whose_master_died_before_it_started_ends_at_once() -> None:
    """The parent-death signal cannot reach a worker whose master died before it was armed:
    the worker sees that its parent is not the master it was started for, and ends."""
    import subprocess
    import sys
    import time

    started = time.monotonic()
    dead_master = "1"  # not this worker's parent: as if the master had died and left it to init
    done = subprocess.run([sys.executable, "-m", "dettui.master.worker", dead_master, "json"],
                          stdin=subprocess.PIPE, capture_output=True, timeout=30)
    assert done.returncode == 0 and done.stdout == b""  # it never said "ready"
    assert time.monotonic() - started < 10
