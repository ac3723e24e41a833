"""The agent's side of the fork server (forkserver.py): which trials it may start, the servers
by (trial user, Python, preload set), and a forked trial as a process the allocation watches.

A trial is forked only when the server runs exactly what a fresh start would: its entrypoint is
`python3 SCRIPT ARGS...` or `python3 -m MODULE ARGS...` (a string without shell syntax, or a
list), that `python3` is the server's Python on the trial's PATH, nothing the trial could put
first on sys.path (its script's directory, its PYTHONPATH, a user site-packages) holds a
module the server has already imported, and no start-up variable (PYTHONHASHSEED,
PYTHONWARNINGS, LD_PRELOAD...) asks for something a running interpreter cannot become.
Everything else starts fresh, and the trial's first log line says which way and why
(`why_fresh`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dettui import lifeline
from dettui.agent import forkserver, trialuser
from dettui.agent.trialuser import TrialUser
from dettui.launch import forkable, sitedir

log = logging.getLogger("dettui.agent.forkpool")
MODES = ("fork", "fresh")
MODE_VAR = "DETTUI_TRIAL_START"  # the agent's default; `--trial-start` wins
SPARE = -1  # the owner of a warmed server no trial has used yet
IDLE_SECONDS = 900.0  # a server no trial used for this long ends at the next trial's start
READY_TIMEOUT = 300.0  # seconds for a server to import its preload set (torch, on a busy host)
PRELOAD = ("dettui.core", "dettui.launch.alias", "dettui.launch._determined", "torch",
           "dettui.pytorch")


def python_run(argv: Sequence[str], workdir: Path, path: str, python: str
               ) -> tuple[forkable.Run | None, str]:
    """The script or module `argv` runs with `python` (the server's), or why it is not that."""
    words, why = forkable.entry_words(argv)
    if words is None:
        return None, why
    program = words[0]
    found = (os.path.join(workdir, program) if os.sep in program
             else shutil.which(program, path=os.pathsep.join(
                 str(workdir / d) for d in path.split(os.pathsep))))
    if found is None or forkable.interpreter(found) != forkable.interpreter(python):
        return None, (f"{program} is {found or 'not found'}, not the fork server's Python "
                      f"({python})")
    run, why = forkable.split_run(words, workdir)
    return (dataclasses.replace(run, executable=found) if run is not None else None), why


def shadowing(dirs: Sequence[Path], modules: set[str],
              user: TrialUser | None = None) -> str | None:
    """A module in `dirs` (first on the trial's sys.path) that the server has already imported
    from elsewhere: a fresh interpreter would import this one instead. A directory `user`
    cannot reach is left out (its interpreter could not import from it either), so that
    nothing is said of what it holds."""
    for d in dirs:
        if user is not None and trialuser.unreachable(d, user) is not None:
            continue
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name.endswith(".pth"):
                continue
            stem = name.split(".", 1)[0] if entry.is_file() else name
            if stem not in modules:
                continue
            if entry.is_file() and name.endswith((".py", ".pyc", ".so")) or \
                    entry.is_dir() and (Path(entry.path) / "__init__.py").exists():
                return f"the trial's own {name} would be imported instead of {stem}"
    return None


def why_fresh(run: forkable.Run | None, reason: str, env: Mapping[str, str], workdir: Path,
              info: Mapping[str, Any], home: str | None, agent_env: Mapping[str, str],
              user: TrialUser | None = None) -> str | None:
    """Why this trial must start fresh rather than forked (None: it may be forked)."""
    if run is None:
        return reason
    why = forkable.env_reason(env, agent_env)
    if why is not None:
        return why
    first = workdir if run.kind == "module" else (workdir / run.target).resolve().parent
    seen_as = env.get("DET_WORKDIR") or str(workdir)  # the work dir as the trial sees it
    extra = []
    for p in env.get("PYTHONPATH", "").split(os.pathsep):
        if not p or os.path.realpath(p) == os.path.realpath(sitedir.DIRECTORY):
            continue
        if p == seen_as or p.startswith(seen_as.rstrip("/") + "/"):
            p = str(workdir) + p[len(seen_as.rstrip("/")):]
        extra.append(workdir / p)  # a relative entry is the work dir's (an absolute one wins)
    if info.get("user_site") and home:
        v = info.get("version", [3, 0])
        site = Path(home, ".local", "lib", f"python{v[0]}.{v[1]}", "site-packages")
        if site.is_dir():
            return f"{site} may hold other packages"
    modules = set(info.get("modules", ()))
    inside = [d for d in (first, *extra) if d.resolve().is_relative_to(workdir.resolve())]
    outside = [d for d in extra if d not in inside]
    # the work dir the trial reaches through the sandbox's bind, whatever lies above it; a
    # directory elsewhere only if the trial's user can reach it
    return shadowing(inside, modules) or shadowing(outside, modules, user)


def mode(option: str | None) -> str:
    """The agent's way of starting trials: `--trial-start`, else DETTUI_TRIAL_START, else fork."""
    chosen = option or os.environ.get(MODE_VAR) or "fork"
    return chosen if chosen in MODES else "fork"


# --- a forked trial, watched like an asyncio subprocess ------------------------------------

class Forked:
    """A trial's process the server forked: its pid (the sandbox's outer process, or the trial
    without one), stdout/stderr readers, and its return code once the server reports it."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._done = asyncio.Event()

    def exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._done.set()

    async def wait(self) -> int:
        await self._done.wait()
        assert self.returncode is not None
        return self.returncode


@dataclass
class Server:
    """One fork server process and its socket."""

    key: tuple[Any, ...]
    proc: asyncio.subprocess.Process
    sock: socket.socket
    info: dict[str, Any] = field(default_factory=dict)
    stale: str | None = None
    dead: bool = False
    ready: asyncio.Future[dict[str, Any]] | None = None
    pids: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    running: dict[str, Forked] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(self.sock, forkserver.MAX_MESSAGE)
                if not data:
                    break
                self.dispatch(json.loads(data))
        except (OSError, ValueError) as exc:
            log.warning("fork server %d: %s", self.proc.pid, exc)
        finally:
            self.dead = True
            if self.ready is not None and not self.ready.done():
                self.ready.set_result({"ready": False, "error": "it exited while starting"})
            for fut in self.pids.values():
                if not fut.done():
                    fut.set_exception(OSError("the fork server exited"))
            for forked in self.running.values():  # their parent-death signal ended them
                forked.exited(-9)

    def dispatch(self, msg: dict[str, Any]) -> None:
        if "ready" in msg:
            self.info = msg
            if self.ready is not None and not self.ready.done():
                self.ready.set_result(msg)
            return
        if "stale" in msg:
            self.stale = str(msg["stale"])
            log.info("fork server %d: %s: a new one starts for the next trial", self.proc.pid,
                     self.stale)
            return
        rid = str(msg.get("id", ""))
        if "pid" in msg:
            fut = self.pids.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["pid"]))
        elif "error" in msg:
            if str(msg["error"]).startswith("stale"):
                self.stale = self.stale or str(msg["error"])
            fut = self.pids.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(OSError(str(msg["error"])))
        elif "exit" in msg:
            forked = self.running.pop(rid, None)
            if forked is not None:
                forked.exited(int(msg["exit"]))

    @property
    def usable(self) -> bool:
        return not self.dead and self.stale is None and bool(self.info.get("ready"))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)


class Pool:
    """The agent's fork servers, started when a trial first needs one."""

    def __init__(self, stage_env: Mapping[str, str], own_pids: set[int],
                 agent_env: Mapping[str, str], preload: Sequence[str] = PRELOAD,
                 clock: Any = time.monotonic) -> None:
        self.clock = clock
        # the part of the agent's environment its trials inherit (allocation.allowed): what
        # a server starts with of it, and what a trial's is compared with
        self.agent_env = dict(agent_env)
        self.used: dict[tuple[Any, ...], float] = {}  # when each server last forked a trial
        self.stage_env = dict(stage_env)
        self.own_pids = own_pids
        self.preload = tuple(preload)
        self.servers: dict[tuple[Any, ...], Server] = {}
        self.retired: list[Server] = []
        self._starting: dict[tuple[Any, ...], asyncio.Task[Server | None]] = {}
        self._ids = itertools.count(1)
        self.failure: str | None = None  # why the last server could not start

    def key(self, uid: int | None, owner: int | None) -> tuple[Any, ...]:
        """One server per Unix user AND per dettui user: two people whose trials run as one
        Unix user (`--trial-user`, a non-root agent) never fork from the same process."""
        return (uid, owner, os.path.realpath(sys.executable), self.preload)

    async def server(self, uid: int | None, owner: int | None) -> Server | None:
        """A ready server for trials of `owner` running as `uid`, started now if there is
        none (None: it could not start; `failure` says why). A warmed one no trial has used
        yet (`warm`) is taken over by the first owner that comes."""
        key = self.key(uid, owner)
        self.used[key] = self.clock()
        self._retire_idle()
        spare = self.key(uid, SPARE)
        if key not in self.servers and key not in self._starting and (
                spare in self.servers or spare in self._starting):
            await self.server(uid, SPARE)  # ready, or failed
            if spare in self.servers:
                self.servers[key] = self.servers.pop(spare)
                self.servers[key].key = key
        current = self.servers.get(key)
        if current is not None and current.usable:
            return current
        if current is not None:  # stale or dead: it serves its running children, then goes
            self.servers.pop(key, None)
            self.retire(current)
        task = self._starting.get(key)
        if task is None:
            task = asyncio.ensure_future(self._start(key))
            self._starting[key] = task
        try:
            server = await asyncio.shield(task)
        finally:
            if task.done():
                self._starting.pop(key, None)
        if server is not None:
            self.servers[key] = server
        return server

    def _retire_idle(self) -> None:
        """Servers of users whose trials stopped coming end (each holds torch's memory)."""
        now = self.clock()
        for key, server in list(self.servers.items()):
            if key[1] != SPARE and now - self.used.get(key, now) > IDLE_SECONDS \
                    and not server.running:
                del self.servers[key]
                self.retire(server)

    def warm(self, uid: int | None) -> None:
        """Start a server for `uid` in the background (the agent's default trial user), for
        the first owner whose trial comes."""
        asyncio.ensure_future(self.server(uid, SPARE))

    async def _start(self, key: tuple[Any, ...]) -> Server | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        prefix = lifeline.pdeathsig_prefix()
        env = {**forkable.server_environment(self.agent_env), **self.stage_env,
               forkserver.ROOM_VAR: "." * forkserver.ROOM}
        hook = os.path.join(sitedir.DIRECTORY, "sitecustomize.py")
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *prefix, sys.executable, "-u", "-m", "dettui.agent.forkserver",
                str(theirs.fileno()), ",".join(self.preload), hook, " " * forkserver.ROOM,
                pass_fds=(theirs.fileno(),), cwd="/", env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=None if prefix else lifeline.die_with_parent)
        except OSError as exc:
            ours.close()
            theirs.close()
            self.failure = f"the fork server could not start: {exc}"
            return None
        finally:
            theirs.close()
        self.own_pids.add(proc.pid)
        server = Server(key, proc, ours, ready=asyncio.get_running_loop().create_future())
        server.reader = asyncio.ensure_future(server.read())
        assert server.ready is not None
        try:
            info = await asyncio.wait_for(asyncio.shield(server.ready), READY_TIMEOUT)
        except TimeoutError:
            info = {"ready": False, "error": f"not ready after {READY_TIMEOUT:.0f} s"}
        if not info.get("ready"):
            self.failure = f"the fork server could not start: {info.get('error')}"
            log.warning("%s", self.failure)
            await self._end(server)
            return None
        failed = info.get("failed") or {}
        log.info("fork server %d ready in %.2f s: preloaded %s%s", proc.pid,
                 time.monotonic() - started, ", ".join(info.get("loaded", [])),
                 "".join(f"; {k} not: {v}" for k, v in failed.items() if k != "torch"))
        self.failure = None
        return server

    async def spawn(self, server: Server, request: dict[str, Any]) -> Forked:
        """Fork one trial: its stdout and stderr are new pipes read here."""
        loop = asyncio.get_running_loop()
        rid = str(next(self._ids))
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        fut: asyncio.Future[int] = loop.create_future()
        server.pids[rid] = fut
        try:
            data = json.dumps({**request, "id": rid}).encode()
            socket.send_fds(server.sock, [data], [null, out_w, err_w])
        except OSError:
            server.pids.pop(rid, None)
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        stdout, stderr = await _reader(out_r), await _reader(err_r)
        forked = Forked(0, stdout, stderr)
        server.running[rid] = forked
        try:
            forked.pid = await fut
        except BaseException:
            server.running.pop(rid, None)
            raise
        return forked

    def retire(self, server: Server) -> None:
        self.retired.append(server)
        asyncio.ensure_future(self._retire(server))

    async def _retire(self, server: Server) -> None:
        while server.running and not server.dead:
            await asyncio.gather(*(f.wait() for f in list(server.running.values())),
                                 return_exceptions=True)
        await self._end(server)
        with contextlib.suppress(ValueError):
            self.retired.remove(server)

    async def _end(self, server: Server) -> None:
        server.close()
        try:
            await asyncio.wait_for(server.proc.wait(), 10.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                server.proc.kill()
            await server.proc.wait()
        self.own_pids.discard(server.proc.pid)
        if server.reader is not None:
            server.reader.cancel()
        server.sock.close()

    async def shutdown(self) -> None:
        servers = [*self.servers.values(), *self.retired]
        self.servers.clear()
        for task in self._starting.values():
            task.cancel()
        for server in servers:
            with contextlib.suppress(ProcessLookupError):
                server.proc.kill()
        await asyncio.gather(*(self._end(s) for s in servers), return_exceptions=True)


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 os.fdopen(fd, "rb", buffering=0))
    return reader

