"""CPU-heavy work off the event loop (and off the store thread): parsing and validating configs,
decoding and packing contexts, decoding and encoding large JSON.

`cpu` runs a function on a small pool of threads of its own, so that a flood of heavy requests
queues there instead of starving the loop. Work that holds the GIL for long stretches (decoding
a 130 MB JSON body, base64 of a 95 MB context) goes to `isolated`: worker processes
(`dettui.master.offload_worker`) that die with the master, so the loop keeps answering requests and
heartbeats meanwhile, and a request that exhausts memory takes down only its worker. Every
input is capped before it gets here.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from dettui import lifeline
from dettui.errors import InvalidArgument, TooLarge
from dettui.master.offload_worker import (
    end_chunks,
    read_answer,
    read_frame,
    write_chunk,
    write_frame,
)

P = ParamSpec("P")
T = TypeVar("T")
log = logging.getLogger("dettui.master")
PROCESSES = 2
HOLD = 16 * 1024 * 1024  # bytes of a body read whole before a worker is taken for it
IN_FLIGHT = 4  # chunks of a streamed body held here at most, waiting to go down the pipe
_ABORT = object()  # in a body's feed: the body was given up

_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dettui-cpu")
# Talking to workers blocks on pipes: threads that live as long as the process (the workers'
# parent-death signal follows the thread that started them).
_talkers = ThreadPoolExecutor(max_workers=PROCESSES, thread_name_prefix="dettui-worker")


async def cpu(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on a worker thread of the CPU pool."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_threads, functools.partial(fn, *args, **kwargs))


async def isolated(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a worker process: `fn` is a module-level function, arguments and
    result are pickled. Errors it raises come back as they were; a worker that dies meanwhile
    (out of memory) is replaced and the request gets a 413."""
    return await _isolated(fn, args, kwargs, None)


async def isolated_body(fn: Callable[Concatenate[bytes, P], T], body: AsyncIterator[bytes],
                        *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(body, *args, **kwargs)` in a worker process, `body` (a request body's chunks as they
    arrive) joined there: never joined or pickled here, which for a 130 MB body would hold the
    event loop for over 100 ms. A body of up to HOLD bytes is read whole first (a slow client
    holds no worker meanwhile); a longer one goes down the pipe as it arrives, at most
    IN_FLIGHT chunks held here, so the master never holds the whole of it. If reading `body`
    fails (over its cap, the client gone), the worker is let go and the error raised here."""
    feed = _Feed(asyncio.get_running_loop())
    size = 0
    async for chunk in body:
        feed.put(chunk)
        size += len(chunk)
        if size > HOLD:
            break
    else:
        feed.put(None)
        return await _isolated(fn, args, kwargs, feed)
    call = asyncio.ensure_future(_isolated(fn, args, kwargs, feed))
    try:
        async for chunk in body:
            await feed.room.acquire()
            if feed.stopped:
                break  # the worker died: `call` says so
            feed.put(chunk, counted=True)
    except BaseException:
        feed.put(_ABORT)  # the talker lets the worker go; its answer is of no interest
        call.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise
    feed.put(None)
    return await call


async def _isolated(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
                    feed: _Feed | None) -> T:
    loop = asyncio.get_running_loop()
    ok, value = await loop.run_in_executor(_talkers, _POOL.call, fn, args, kwargs, feed)
    if ok:
        return value  # type: ignore[no-any-return]
    if isinstance(value, MemoryError):
        raise TooLarge("the request could not be processed: it needs more memory than this "
                       "machine gave the master") from value
    raise value


class _Feed:
    """A body's chunks, from the event loop to the thread that writes them to a worker: the
    chunks, then None at the end (or _ABORT). `room` holds the loop back while IN_FLIGHT
    chunks wait to be written."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.chunks: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()
        self.room = asyncio.Semaphore(IN_FLIGHT)
        self.stopped = False  # the writing thread reads no more of it

    def put(self, chunk: bytes | object | None, counted: bool = False) -> None:
        """Queue a chunk (`counted`: it took room), the end (None) or _ABORT."""
        if chunk != b"":  # an empty frame would end the body
            self.chunks.put((chunk, counted))

    def get(self) -> tuple[Any, bool]:
        return self.chunks.get()

    def written(self, counted: bool) -> None:
        """A chunk is in the pipe: room for another (called from the writing thread)."""
        if counted:
            self.loop.call_soon_threadsafe(self.room.release)

    def stop(self) -> None:
        """The writing thread is done with it (the body sent, or the worker gone): the loop
        must not wait for room any more."""
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self.loop.call_soon_threadsafe(self._stopped)

    def _stopped(self) -> None:
        self.stopped = True
        self.room.release()


def warm_up(*modules: str) -> None:
    """Start the worker processes now, importing `modules` (what the work will need), rather
    than on first use."""
    _POOL.preload(modules)
    for _ in range(PROCESSES):
        _talkers.submit(_POOL.prestart)


class _Worker:
    def __init__(self, modules: tuple[str, ...]) -> None:
        self.proc = subprocess.Popen(
            # -P: the master's working directory is not on the worker's sys.path (a yaml.py
            # there would be imported, as the master's user)
            [*lifeline.pdeathsig_prefix(), sys.executable, "-P", "-m",
             "dettui.master.offload_worker", str(os.getpid()), *modules],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            # a terminal may hold the dashboard: nothing of the worker's may reach it
            stderr=subprocess.DEVNULL if _tty(sys.stderr) else None)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        if read_frame(self.stdout) != b"ready":
            self.close()
            raise RuntimeError("a master worker process failed to start")

    def call(self, request: bytes, feed: _Feed | None) -> tuple[bool, Any] | object | None:
        """The answer; None if the worker died, _ABORT if the body was given up."""
        try:
            write_frame(self.stdin, request)
            if feed is not None:
                while True:
                    chunk, counted = feed.get()
                    if chunk is None or chunk is _ABORT:
                        break
                    write_chunk(self.stdin, chunk)
                    del chunk  # in the pipe: the master need not hold it while the worker works
                    feed.written(counted)
                if chunk is _ABORT:
                    return _ABORT
                end_chunks(self.stdin)
        except (BrokenPipeError, OSError):
            return None
        return read_answer(self.stdout)

    def close(self) -> None:
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


def _tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _Pool:
    """Idle workers; one call at a time per worker; at most PROCESSES of them."""

    def __init__(self) -> None:
        self.idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self.modules: tuple[str, ...] = ()
        self.started = 0
        self.lock = threading.Lock()

    def preload(self, modules: tuple[str, ...]) -> None:
        with self.lock:
            self.modules = tuple(sorted({*self.modules, *modules}))

    def prestart(self) -> None:
        with self.lock:
            if self.started >= PROCESSES:
                return
        self.idle.put(self._take())

    def _take(self) -> _Worker:
        """A live worker: an idle one, else a new one while fewer than PROCESSES run, else the
        next to come back. One that died while idle (the kernel's OOM killer picks the
        largest process, a worker that read a big context) is replaced, not handed a request
        it would fail."""
        while True:
            worker = self._idle_or_new()
            if worker.proc.poll() is None:
                return worker
            log.warning("a master worker process died while idle (exit %s); starting another",
                        worker.proc.returncode)
            worker.close()
            with self.lock:
                self.started -= 1

    def _idle_or_new(self) -> _Worker:
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        with self.lock:
            start = self.started < PROCESSES
            if start:
                self.started += 1
        if not start:
            return self.idle.get()
        try:
            return _Worker(self.modules)
        except BaseException:
            with self.lock:
                self.started -= 1
            raise

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             feed: _Feed | None = None) -> tuple[bool, Any]:
        try:
            request = pickle.dumps((fn, args, kwargs, feed is not None),
                                   protocol=pickle.HIGHEST_PROTOCOL)
            worker = self._take()
            answer = worker.call(request, feed)
        finally:
            if feed is not None:
                feed.stop()
        if answer is None or answer is _ABORT:
            worker.close()
            with self.lock:
                self.started -= 1
            if answer is _ABORT:
                return False, InvalidArgument("the request body was not read to its end")
            log.error("a master worker process died while running %s", fn.__qualname__)
            return False, TooLarge("the request could not be processed: the worker reading "
                                   "it died (it needed more memory than this machine gave it)")
        self.idle.put(worker)
        return answer  # type: ignore[return-value]

    def close(self) -> None:
        """At exit: idle workers end (busy ones die with the process)."""
        while True:
            try:
                self.idle.get_nowait().close()
            except queue.Empty:
                return


_POOL = _Pool()
atexit.register(_POOL.close)
