"""One node's workers forked from the torch_distributed launcher itself, instead of torchrun
starting `python -m dettui.launch.worker -- python3 train.py` per rank (three interpreters,
each importing torch, per worker, plus torchrun's own).

Used on a single node, with no torchrun options given, when the agent runs its trials with the
fork server (it sets WORKER_START=fork in the trial's environment) and each worker is a Python
script or module run by this Python (`forkable.split_run`) from the launcher's directory.
The launcher, already holding torch (forked from the fork server, or having imported it once),
forks every rank before it starts anything else, then, single-threaded: prefixes each rank's
output with `[rank=N] `, forwards SIGTERM/SIGINT/SIGHUP to the workers, and keeps the launcher
contract: when a worker exits non-zero the others get SIGTERM, SIGKILL after GRACE, and the
launcher exits with that worker's code (0 only when every worker exits 0). Each worker gets the
environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT,
TORCHELASTIC_*: rank 0 serves the store), dies with the launcher (parent-death signal), and runs
its script as `python` would (`inproc.run`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from dettui.launch import forkable, inproc, spec
from dettui.launch.wrap_rank import prefix_lines

WORKER_START = "DETTUI_WORKER_START"  # "fork": the agent forks trials, so may the launcher
GRACE = 5.0
OUTPUT_GRACE = 2.0  # seconds to read what the workers wrote last, once all have ended
PR_SET_PDEATHSIG = 1


def eligible(overrides: Sequence[str], script: Sequence[str], topo: spec.Topology,
             env: dict[str, str]) -> forkable.Run | None:
    """The Python run each worker would be, when this launcher may fork them (else None)."""
    if env.get(WORKER_START) != "fork" or overrides or topo.nnodes != 1:
        return None
    words = list(script)
    if not words:
        return None
    found = words[0] if os.sep in words[0] else shutil.which(words[0], path=env.get("PATH"))
    if found is None or forkable.interpreter(found) != forkable.interpreter(sys.executable):
        return None
    run, _ = forkable.split_run(words, Path.cwd())
    if run is None or run.kind == "script" and \
            os.path.dirname(os.path.realpath(run.target)) != os.path.realpath(os.getcwd()):
        return None  # the launcher's sys.path[0] (its cwd) is the workers' too
    return run


def worker_env(base: dict[str, str], rank: int, nproc: int, port: int) -> dict[str, str]:
    """What torchrun gives a worker of a one-node job (local_elastic_agent)."""
    env = dict(base)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
        "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(nproc), "WORLD_SIZE": str(nproc),
        "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": str(nproc), "MASTER_ADDR": "localhost",
        "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": base.get(
            "TORCHELASTIC_RUN_ID", uuid.uuid4().hex), "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    })
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun
    return env


def _child(run: forkable.Run, env: dict[str, str], out_w: int, err_w: int,
           launcher: int) -> None:
    code = 1
    try:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(137)
        inproc.reset_signals()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 20)  # as subprocess's close_fds: the launcher's pipes stay its
        base = [p for p in sys.path[1:] if p]
        code = inproc.run({"kind": run.kind, "target": run.target, "args": list(run.args)},
                          env, None, base)
    except SystemExit as exc:
        code = inproc.exit_code(exc)
    except BaseException:  # noqa: BLE001 - shown as python shows it
        with contextlib.suppress(BaseException):
            import traceback

            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            inproc.flush()
        os._exit(code)


def supervise(run: forkable.Run, nproc: int, port: int, extra_env: dict[str, str]) -> int:
    base = {**os.environ, **extra_env}
    base.pop(WORKER_START, None)
    me = os.getpid()
    pipes: dict[int, tuple[int, str]] = {}  # read fd -> (rank, stream)
    ranks: dict[int, int] = {}  # pid -> rank
    sys.stdout.flush()
    sys.stderr.flush()
    for rank in range(nproc):  # every fork before any thread or selector exists
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in pipes:
                os.close(fd)
            os.close(out_r)
            os.close(err_r)
            _child(run, worker_env(base, rank, nproc, port), out_w, err_w, me)
        os.close(out_w)
        os.close(err_w)
        pipes[out_r] = (rank, "out")
        pipes[err_r] = (rank, "err")
        ranks[pid] = rank
    return _watch(pipes, ranks)


def _watch(pipes: dict[int, tuple[int, str]], ranks: dict[int, int]) -> int:
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stopped = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopped
        stopped = True
        for pid in list(ranks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    sel = selectors.DefaultSelector()
    sel.register(wake_r, selectors.EVENT_READ, None)
    rests: dict[int, bytes] = {}
    for fd in pipes:
        sel.register(fd, selectors.EVENT_READ, fd)
    failure: tuple[int, int] | None = None  # (rank, code) of the first worker that failed
    kill_at: float | None = None
    drained_by: float | None = None  # every worker ended: what they left holds the pipes
    while ranks or pipes and (drained_by is None or time.monotonic() < drained_by):
        deadlines = [t for t in (kill_at, drained_by) if t is not None]
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        for key, _ in sel.select(timeout):
            if key.data is None:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
                continue
            fd = key.data
            rank, stream = pipes[fd]
            out = sys.stdout.buffer if stream == "out" else sys.stderr.buffer
            chunk = os.read(fd, 65536)
            if chunk:
                lines, rests[fd] = prefix_lines(chunk, rank, rests.get(fd, b""))
            else:
                lines, _ = prefix_lines(b"\n", rank, rests.pop(fd, b"")) if rests.get(fd) \
                    else (b"", b"")
                sel.unregister(fd)
                os.close(fd)
                del pipes[fd]
            if lines:
                out.write(lines)
                out.flush()
        for pid, code in _reaped(ranks):
            rank = ranks.pop(pid)
            if code != 0 and failure is None:
                failure = (rank, code)
                if not stopped:
                    print(f"dettui launcher: rank {rank} exited with {code}; ending the other "
                          "workers", file=sys.stderr, flush=True)
                for other in ranks:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(other, signal.SIGTERM)
                kill_at = time.monotonic() + GRACE
        if not ranks and drained_by is None:
            drained_by = time.monotonic() + OUTPUT_GRACE
        if kill_at is not None and time.monotonic() >= kill_at:
            for other in ranks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(other, signal.SIGKILL)
            kill_at = None
    return failure[1] if failure else 0


def _reaped(ranks: dict[int, int]) -> list[tuple[int, int]]:
    out = []
    while ranks:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid in ranks:
            code = os.waitstatus_to_exitcode(status)
            out.append((pid, code if code >= 0 else 128 - code))
    return out
