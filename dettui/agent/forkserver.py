"""The fork server: a Python that has already imported torch and dettui.core, and forks each
trial's process from itself instead of starting a new interpreter.

A fresh trial pays ~0.1 s for the interpreter, the site hook and `import dettui.core`, and
~1.4 s for `import torch`; a child forked from a process that has done all of that runs the
trial's first line in a few milliseconds. The agent starts one server per (trial user, Python,
preload set) when a trial first needs it (`forkpool.py`), as
`python -u -m dettui.agent.forkserver FD PRELOAD` from / with the sandbox's fixed
environment (no user's PATH, PYTHONPATH or LD_PRELOAD: it runs as the agent's user, root on a
shared machine), talks to it over a SEQPACKET socket (FD), and gives each request the trial's stdin,
stdout and stderr as file descriptors (SCM_RIGHTS).

The server is single-threaded and never runs a multi-threaded op or touches CUDA, NCCL or gloo
before forking (PyTorch's rule for fork); it checks that no thread was started by what it
preloaded. Each child, before anything of the trial's runs: resets every signal, takes the
trial's stdio, starts a session, becomes the trial's sandbox (`nsetup.enter`: its own mount and
PID namespaces, the trial's Unix user without capabilities, as a fresh trial gets from
`sandbox.wrap`), then reads its environment from the file the agent wrote for it
(`trial_exec`: the server never sees a trial's environment, so no token of one trial stays in
the memory the next one is forked from), and runs the script or module as `python` would:
sys.argv, sys.path (the script's directory, PYTHONPATH, then the server's), a `__main__` of its
own, atexit handlers of its own (the server's are cleared), `random` and numpy reseeded, the
trial's OMP/MKL thread count, non-daemon threads joined and atexit run at the end, then
`os._exit` (what a fresh interpreter spends in finalisation, ~0.3 s after torch, is skipped).

A requests: {"id", "kind": "script"|"module", "target", "args", "env_file", "plan", "label"}
with 3 fds. Replies: {"ready", ...} once; {"id", "pid"} when forked; {"id", "exit": code}
(negative: the signal that ended it, as asyncio's returncode); {"id", "error": text} when no
child was made; {"stale": why} when a module it loaded changed on disk (it then refuses new
requests and the agent starts another server; this one stays until its children end).

Standard library, nsetup and trial_exec only at import: what it preloads is its argument.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import importlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from dettui.agent import nsetup, trial_exec
from dettui.launch import forkable, inproc

ROOM_VAR = "DETTUI_FORK_ROOM"  # room in the server's environment for a child's marks
ROOM = 1024  # bytes of it, and of the last argument that makes room for a child's command
PR_SET_DUMPABLE = 4
MAX_MESSAGE = 1 << 20  # a request: argv and a sandbox plan, never an environment
MAX_FD = 1 << 20  # closerange's end: Linux's close_range(2) makes it one system call
SITE_HOOK = "dettui_trial_site"  # the trial's sitecustomize, loaded without running it


# --- the server ----------------------------------------------------------------------------

def send(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(message).encode())


def preload(names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Import each module (those missing are left out); the names loaded, and why not."""
    loaded, failed = [], {}
    for name in names:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except BaseException as exc:  # noqa: BLE001 - a broken package must not stop the rest
            failed[name] = f"{type(exc).__name__}: {exc}"[:300]
    return loaded, failed


def load_site_hook(path: str) -> ModuleType | None:
    """dettui's trial sitecustomize, as a module that has not run (each child runs it)."""
    spec = importlib.util.spec_from_file_location(SITE_HOOK, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def user_site_possible() -> bool:
    """Whether a fresh start of this Python puts a user's site-packages on sys.path (not in a
    venv that hides the system's site-packages)."""
    import site

    return bool(site.ENABLE_USER_SITE)


def module_files() -> list[str]:
    """The files the loaded modules came from (what a change on disk makes stale)."""
    out = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path):
            out.append(path)
    return out


class Watch:
    """inotify on the directories the loaded modules came from: any .py, .so or .pth made,
    changed, moved or removed there makes the server stale (a package upgraded under it)."""

    IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
    IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
    IN_CLOEXEC, IN_NONBLOCK = 0o2000000, 0o4000
    MASK = (IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
            | IN_MOVE_SELF)
    SUFFIXES = (".py", ".so", ".pth", ".pyd")

    def __init__(self, files: Sequence[str]) -> None:
        self.fd = -1
        self.dirs: dict[int, str] = {}
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = int(libc.inotify_init1(self.IN_CLOEXEC | self.IN_NONBLOCK))
        except (OSError, AttributeError):
            return
        if fd < 0:
            return
        self.fd = fd
        for d in sorted({os.path.dirname(f) for f in files}):
            wd = int(libc.inotify_add_watch(fd, os.fsencode(d), self.MASK))
            if wd >= 0:
                self.dirs[wd] = d

    def changed(self) -> str | None:
        """What changed since the last look (None: nothing that matters)."""
        try:
            data = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return None
        offset, why = 0, None
        while offset + 16 <= len(data):
            wd, mask, _cookie, size = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16: offset + 16 + size].split(b"\0", 1)[0].decode(
                errors="replace")
            offset += 16 + size
            where = self.dirs.get(wd, "?")
            if mask & (self.IN_DELETE_SELF | self.IN_MOVE_SELF):
                why = why or f"{where} was removed or moved"
            elif name.endswith(self.SUFFIXES):
                why = why or f"{os.path.join(where, name)} changed"
        return why


def serve(sock: socket.socket, names: Sequence[str], hook_path: str) -> int:
    loaded, failed = preload(names)
    hook = load_site_hook(hook_path) if hook_path else None
    threads = threading.active_count()
    gc.collect()
    gc.freeze()  # what the children share stays shared: no collection writes to its pages
    top = sorted({n.split(".", 1)[0] for n in sys.modules} - set(sys.builtin_module_names)
                 - forkable.fresh_start_modules(os.path.dirname(hook_path) if hook_path else ""))
    watch = Watch(module_files())
    if threads != 1:  # a preloaded module started a thread: forking would copy it dead
        send(sock, {"ready": False, "error": f"{threads - 1} thread(s) started by the "
                    f"preloaded modules ({', '.join(loaded)}): children cannot be forked"})
        return 1
    send(sock, {"ready": True, "pid": os.getpid(), "python": sys.executable,
                "version": list(sys.version_info[:3]), "loaded": loaded, "failed": failed,
                "modules": top, "user_site": user_site_possible(),
                "watching": len(watch.dirs)})
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    # held open by this process alone: a child sees it end when the server dies
    life_r, life_w = os.pipe2(os.O_CLOEXEC)
    pid_namespaces = nsetup.PidNamespaces()
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "sock")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    if watch.fd >= 0:
        sel.register(watch.fd, selectors.EVENT_READ, "watch")
    children: dict[int, str] = {}
    stale: str | None = None
    closing = False
    while True:
        if closing and not children:
            return 0
        for key, _ in sel.select():
            if key.data == "child":
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
                reap(sock, children)
            elif key.data == "watch":
                why = watch.changed()
                if why and stale is None:
                    stale = why
                    send(sock, {"stale": why})
            else:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 3)
                except InterruptedError:
                    continue
                except OSError:
                    data, fds = b"", []
                if not data:  # the agent closed its end: serve the running ones, then go
                    closing = True
                    sel.unregister(sock)
                    continue
                request = _parse(data)
                rid = str(request.get("id", ""))
                if stale is not None:
                    _close(fds)
                    send(sock, {"id": rid, "error": f"stale: {stale}"})
                elif len(fds) != 3 or not rid:
                    _close(fds)
                    send(sock, {"id": rid, "error": "a request needs an id and 3 fds"})
                else:
                    try:
                        pid = spawn(sock, (wake_r, wake_w, watch.fd, life_w), request, fds,
                                    hook, pid_namespaces, life_r)
                    except (OSError, ValueError, KeyError, TypeError) as exc:
                        # no child: this request fails, the server and its trials go on
                        send(sock, {"id": rid, "error": f"{type(exc).__name__}: {exc}"})
                        continue
                    finally:
                        _close(fds)
                    children[pid] = rid
                    send(sock, {"id": rid, "pid": pid})
                    if pid_namespaces.broken and stale is None:
                        stale = pid_namespaces.broken
                        send(sock, {"stale": stale})
        reap(sock, children)


def _parse(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def reap(sock: socket.socket, children: dict[int, str]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = children.pop(pid, None)
        if rid is not None:
            send(sock, {"id": rid, "exit": os.waitstatus_to_exitcode(status)})


def spawn(sock: socket.socket, own: Sequence[int], request: dict[str, Any],
          fds: Sequence[int], hook: ModuleType | None, pid_namespaces: nsetup.PidNamespaces,
          lifeline: int) -> int:
    """Fork the request's child: straight into a PID namespace of its own, as its init, when
    the sandbox asks for namespaces and this server may make them (root); else plainly (the
    child makes them itself). `own`: the server's descriptors the child closes at once."""
    plan = nsetup.Plan.from_json(request["plan"]) if request.get("plan") else None
    into = plan is not None and plan.namespaces and not plan.user_namespace \
        and pid_namespaces.usable
    pid = pid_namespaces.fork_into() if into else os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: never returns to the server's loop
        signal.set_wakeup_fd(-1)
        for fd in (*own, sock.fileno()):
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
        if into:  # its parent's death must end it (getppid() says nothing in a namespace)
            nsetup.arm_death_signal(lifeline)
        code = child(request, fds, hook, init=into)
    except SystemExit as exc:
        code = inproc.exit_code(exc)
    except BaseException:  # noqa: BLE001 - the trial's own failure, shown as python shows it
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            inproc.flush()
        os._exit(code)


def show_marks(marks: dict[str, str]) -> None:
    """Make /proc/<pid>/environ of this child show `marks` (the allocation's, by which the
    agent and `ps e` find a trial's processes) instead of the server's start-up environment:
    that area is this process's own memory (on its stack), which the agent made room in
    (ROOM_VAR). The C environment is emptied first, so nothing points into it any more."""
    for name in list(os.environ):
        os.unsetenv(name)
    start, end = _area(47)  # env_start, env_end (fields 50, 51)
    data = b"".join(f"{k}={v}".encode() + b"\0" for k, v in marks.items() if "\0" not in k + v)
    room = f"{ROOM_VAR}=".encode()
    if start <= 0 or end <= start or len(data) + len(room) + 1 >= end - start:
        return
    # the rest is one variable (the room), not NULs a reader would take for empty entries
    rest = end - start - len(data) - len(room) - 1
    ctypes.memmove(start, data + room + b"." * rest + b"\0", end - start)


def _area(index: int) -> tuple[int, int]:
    """Two addresses of /proc/self/stat from its field `index` (counted from the state, after
    the command's parenthesis), or (0, 0) when it cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[index]), int(fields[index + 1])
    except (OSError, IndexError, ValueError):
        return 0, 0


def show_title(title: str) -> None:
    """Make `ps` (/proc/<pid>/cmdline) show the trial's command instead of the server's: its
    arguments' area, which the agent made room in (a last argument of spaces), overwritten as
    setproctitle(3) does (one line, its last byte not NUL)."""
    start, end = _area(45)  # arg_start, arg_end (fields 48, 49)
    size = end - start
    data = os.fsencode(title.replace("\0", " "))[: max(0, size - 2)] + b"\0"
    if start <= 0 or size < 2:
        return
    ctypes.memmove(start, data + b" " * (size - len(data)), size)


def child(request: dict[str, Any], fds: Sequence[int], hook: ModuleType | None,
          init: bool = False) -> int:
    inproc.reset_signals()
    title = str(request.get("title") or "")
    # the sandbox's outer process keeps the label (as `unshare ... dettui-sandbox trial 3`
    # does for a fresh trial); the trial itself shows its command
    show_title(f"dettui-sandbox {request.get('label') or ''}" if request.get("plan") else title)
    marks = request.get("marks")
    if isinstance(marks, dict):
        show_marks({str(k): str(v) for k, v in marks.items()})
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    # nothing of the server's reaches the trial: its socket, its selector's epoll (through
    # which a trial could change what the server waits for), whatever a preloaded module holds
    os.closerange(3, MAX_FD)
    os.setsid()
    plan = request.get("plan")
    if plan:
        parsed = nsetup.Plan.from_json(plan)
        nsetup.enter(parsed, init=init)
        # A change of user leaves a process undumpable until it execs (a fresh trial does):
        # its own /proc/self/environ unreadable, its user unable to py-spy or ptrace it. The
        # server's memory it holds keeps no secret (no trial's environment ever reaches it).
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        show_title(title)
    env_file = str(request.get("env_file", ""))
    try:
        env = trial_exec.read(env_file)
    except OSError as exc:
        print(f"dettui: cannot read the trial's environment: {exc}", file=sys.stderr)
        return 126
    with contextlib.suppress(OSError):
        os.unlink(env_file)
    return inproc.run(request, env, hook)


def base_path() -> list[str]:
    """sys.path without what a trial's own start puts there: `-m`'s working directory (/),
    and the agent's user's site-packages (a trial has its own user's, or starts fresh). The
    server runs without interpreter flags (-E, -s, -I): a forked trial has sys.flags as a
    fresh one, which multiprocessing's spawn passes on to its workers."""
    import site

    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    return [p for p in sys.path[1:] if p and p != user_site]


def main(argv: Sequence[str]) -> int:
    if len(argv) < 1:
        print("usage: python -m dettui.agent.forkserver FD [PRELOAD,...] [SITE_HOOK]",
              file=sys.stderr)
        return 2
    sock = socket.socket(fileno=int(argv[0]))
    names = [n for n in (argv[1] if len(argv) > 1 else "").split(",") if n]
    hook_path = argv[2] if len(argv) > 2 else ""
    inproc.BASE_PATH[:] = base_path()
    sys.path[:] = inproc.BASE_PATH
    try:
        return serve(sock, names, hook_path)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
