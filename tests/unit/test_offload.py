"""Work in the master's worker processes: results and errors come back whole, a worker that
dies is replaced, and the workers are other processes than the master."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dettui.errors import InvalidArgument, TooLarge
from dettui.master import offload
from dettui.paths import checkpoint_uuid

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _tests_importable_in_workers() -> Iterator[None]:
    """The workers run with -P (the working directory is not on their sys.path, so that a
    yaml.py there is never imported): this module's functions, which they run here, are found
    through PYTHONPATH, in workers started afresh."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *([old] if old else [])])
    offload._POOL.close()
    offload._POOL.started = 0
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


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


async def _chunks(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def test_a_body_goes_down_in_its_chunks_and_arrives_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Held whole (under HOLD) or streamed as it arrives (over it), a body arrives whole; an
    empty chunk does not end it early."""
    chunks = [b"abc" + b"x" * (1 << 20), b"", b"y" * 12345 + b"xyz"]
    want = f"{(1 << 20) + 12351}:abc..xyz:t"
    assert await offload.isolated_body(_sized, _chunks(*chunks), "t") == want
    monkeypatch.setattr(offload, "HOLD", 100)
    assert await offload.isolated_body(_sized, _chunks(*chunks), "t") == want
    many = [b"%05d" % i for i in range(2000)]  # streamed in 2,000 frames
    assert await offload.isolated_body(len, _chunks(*many)) == 10_000
    assert await offload.isolated_body(_sized, _chunks(), "empty") == "0:..:empty"
    with pytest.raises(InvalidArgument, match="must be a UUID"):  # the body was consumed
        await offload.isolated_body(checkpoint_uuid, _chunks(b"body"), "uuid")
    for _ in range(offload.PROCESSES + 1):  # every worker is still in step with its pipe
        assert await offload.isolated(sorted, [2, 1]) == [1, 2]


async def test_a_streamed_body_is_held_back_while_no_worker_takes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While every worker is busy, the master reads no more of a long body than IN_FLIGHT
    chunks past what it holds (the client waits, as TCP makes it), then the rest goes down."""
    monkeypatch.setattr(offload, "HOLD", 0)
    monkeypatch.setattr(offload, "IN_FLIGHT", 2)
    read: list[float] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(20):
            read.append(time.monotonic())
            yield b"z" * 1000

    busy = [asyncio.ensure_future(offload.isolated(time.sleep, 1.5))
            for _ in range(offload.PROCESSES)]
    await asyncio.sleep(0.3)  # both workers are sleeping
    started = time.monotonic()
    got = asyncio.ensure_future(offload.isolated_body(len, body()))
    await asyncio.sleep(0.6)
    assert 1 <= len(read) <= 1 + 2 + 1, read  # the held chunk, the room, the one waiting
    assert await got == 20_000
    await asyncio.gather(*busy)
    assert read[-1] - started >= 0.5


async def test_a_body_given_up_midway_lets_its_worker_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The client goes away (or the cap is passed) while its body streams: the error is the
    caller's, the half-fed worker is replaced, the others are in step."""
    monkeypatch.setattr(offload, "HOLD", 10)

    async def cut() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"q" * 100
            await asyncio.sleep(0.01)
        raise TooLarge("over the cap")

    for _ in range(offload.PROCESSES + 1):
        with pytest.raises(TooLarge, match="over the cap"):
            await offload.isolated_body(len, cut())
    for _ in range(offload.PROCESSES * 2):
        assert await offload.isolated(sorted, [2, 1]) == [1, 2]
    assert await offload.isolated_body(len, _chunks(b"x" * 50)) == 50


async def test_a_worker_that_dies_while_a_body_streams_is_an_error_not_a_hang(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reading a long body dies (out of memory, killed): the caller gets a 413 at
    once, however much of the body is still to come, and a new worker takes its place."""
    import psutil

    monkeypatch.setattr(offload, "HOLD", 0)
    monkeypatch.setattr(offload, "IN_FLIGHT", 2)
    assert await offload.isolated(sorted, [2, 1]) == [1, 2]  # the workers are up

    async def endless() -> AsyncIterator[bytes]:
        for i in range(10_000):
            if i == 3:
                for child in psutil.Process().children():
                    if "dettui.master.offload_worker" in " ".join(child.cmdline()):
                        child.kill()
            yield b"w" * (1 << 20)
            await asyncio.sleep(0)

    with pytest.raises(TooLarge, match="died"):
        await asyncio.wait_for(offload.isolated_body(len, endless()), 30)
    assert await offload.isolated_body(len, _chunks(b"x" * 50)) == 50


async def test_a_worker_that_died_while_idle_is_replaced_not_handed_a_request() -> None:
    """Workers killed while idle (the OOM killer picks the largest process): the next calls
    get new workers and their answers, not a 413."""
    import psutil

    assert await offload.isolated(sorted, [2, 1]) == [1, 2]
    assert await offload.isolated_body(len, _chunks(b"x" * 5)) == 5  # the workers are up
    workers = [c for c in psutil.Process().children()
               if "dettui.master.offload_worker" in " ".join(c.cmdline())]
    assert workers
    for child in workers:
        child.kill()
    psutil.wait_procs(workers, timeout=10)
    for _ in range(2 * offload.PROCESSES):
        assert await offload.isolated(sorted, [3, 1, 2]) == [1, 2, 3]


def _big(n: int) -> tuple[bytes, list[bytes], str]:
    return b"a" * n + b"z", [b"b" * n, b"c"], "small"


async def test_large_bytes_in_an_answer_come_back_whole() -> None:
    """A result's large bytes come back in frames of their own (out of band), equal."""
    n = 3 * (1 << 20)
    got = await offload.isolated(_big, n)
    assert got == _big(n) and type(got[0]) is bytes
    assert await offload.isolated(_big, 5) == _big(5)


async def test_a_result_that_cannot_be_pickled_comes_back_as_an_error() -> None:
    with pytest.raises(TypeError, match="pickle"):
        await offload.isolated(threading.Lock)
    assert await offload.isolated(sorted, [2, 1]) == [1, 2]


def test_a_worker_whose_master_died_before_it_started_ends_at_once() -> None:
    """The parent-death signal cannot reach a worker whose master died before it was armed:
    the worker sees that its parent is not the master it was started for, and ends."""
    import subprocess
    import sys
    import time

    started = time.monotonic()
    dead_master = "1"  # not this worker's parent: as if the master had died and left it to init
    done = subprocess.run([sys.executable, "-m", "dettui.master.offload_worker", dead_master,
                           "json"], stdin=subprocess.PIPE, capture_output=True, timeout=30)
    assert done.returncode == 0 and done.stdout == b""  # it never said "ready"
    assert time.monotonic() - started < 10
