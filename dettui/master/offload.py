"""CPU-heavy work off the event loop (and off the store thread): parsing and validating configs,
decoding and packing contexts, decoding and encoding large JSON.

`cpu` runs a function on a small pool of threads of its own, so that a flood of heavy requests
queues there instead of starving the loop. Work that holds the GIL for long stretches (decoding
a 130 MB JSON body, base64 of a 95 MB context) goes to `isolated`: worker processes
(`dettui.master.worker`) that die with the master, so the loop keeps answering requests and
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from dettui import lifeline
from dettui.errors import TooLarge
from dettui.master.worker import read_frame, write_chunks, write_frame

P = ParamSpec("P")
T = TypeVar("T")
log = logging.getLogger("dettui.master")
PROCESSES = 2

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


async def isolated_body(fn: Callable[Concatenate[bytes, P], T], body: list[bytes],
                        *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(b"".join(body), *args, **kwargs)` in a worker process, the body joined there: its
    chunks go down the pipe as they are (a write releases the GIL), not joined or pickled
    here, which for a 130 MB request body would hold the event loop for over 100 ms. The
    list is emptied once sent (whoever else holds it, the request's cache too): the body is
    the worker's from then on."""
    return await _isolated(fn, args, kwargs, body)


async def _isolated(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
                    body: list[bytes] | None) -> T:
    loop = asyncio.get_running_loop()
    ok, value = await loop.run_in_executor(_talkers, _POOL.call, fn, args, kwargs, body)
    if ok:
        return value  # type: ignore[no-any-return]
    if isinstance(value, MemoryError):
        raise TooLarge("the request could not be processed: it needs more memory than this "
                       "machine gave the master") from value
    raise value


def warm_up(*modules: str) -> None:
    """Start the worker processes now, importing `modules` (what the work will need), rather
    than on first use."""
    _POOL.preload(modules)
    for _ in range(PROCESSES):
        _talkers.submit(_POOL.prestart)


class _Worker:
    def __init__(self, modules: tuple[str, ...]) -> None:
        self.proc = subprocess.Popen(
            [*lifeline.pdeathsig_prefix(), sys.executable, "-m", "dettui.master.worker",
             str(os.getpid()), *modules],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            # a terminal may hold the dashboard: nothing of the worker's may reach it
            stderr=subprocess.DEVNULL if _tty(sys.stderr) else None)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        if read_frame(self.stdout) != b"ready":
            self.close()
            raise RuntimeError("a master worker process failed to start")

    def call(self, request: bytes, body: list[bytes] | None) -> bytes | None:
        try:
            write_frame(self.stdin, request)
            if body is not None:
                write_chunks(self.stdin, body)
                body.clear()  # sent: the master need not hold 130 MB while the worker works
        except (BrokenPipeError, OSError):
            return None
        return read_frame(self.stdout)

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
             body: list[bytes] | None = None) -> tuple[bool, Any]:
        request = pickle.dumps((fn, args, kwargs, body is not None),
                               protocol=pickle.HIGHEST_PROTOCOL)
        worker = self._take()
        answer = worker.call(request, body)
        if answer is None:
            worker.close()
            with self.lock:
                self.started -= 1
            log.error("a master worker process died while running %s", fn.__qualname__)
            return False, TooLarge("the request could not be processed: the worker reading "
                                   "it died (it needed more memory than this machine gave it)")
        self.idle.put(worker)
        result: tuple[bool, Any] = pickle.loads(answer)
        del answer  # a 95 MiB context came in it: not kept while the caller stores it
        return result


    def close(self) -> None:
        """At exit: idle workers end (busy ones die with the process)."""
        while True:
            try:
                self.idle.get_nowait().close()
            except queue.Empty:
                return


_POOL = _Pool()
atexit.register(_POOL.close)
