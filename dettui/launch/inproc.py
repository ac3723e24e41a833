"""Run a Python script or module in this process as a new `python` would, after a fork: what
the fork server's children (agent/forkserver.py) and a launcher's forked workers
(launch/forked_workers.py) do instead of exec'ing an interpreter. Standard library only.

Before: every signal as a new interpreter has it (`reset_signals`). Then `run`: the trial's
environment, sys.argv, sys.path (the script's directory, PYTHONPATH, then the base), a
`__main__` of its own, atexit handlers of its own, numpy's global generator reseeded (`random`
reseeds itself at fork), OMP/MKL thread counts applied to torch, and at the end non-daemon
threads joined, atexit run and stdio flushed, as an interpreter does before finalisation; the
caller then leaves with `os._exit` (finalisation, ~0.3 s after torch, is skipped).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import Any

BASE_PATH: list[str] = []  # the fork server's sys.path (set by it at start)


def reset_signals() -> None:
    """Every signal as a new interpreter has it: default, SIGINT raising KeyboardInterrupt,
    SIGPIPE and SIGXFSZ ignored; none blocked."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def run(request: dict[str, Any], env: dict[str, str], hook: ModuleType | None = None,
        base_path: Sequence[str] | None = None) -> int:
    """The trial, as `python SCRIPT ARGS` or `python -m MODULE ARGS` would run it here:
    `request` {"kind": "script"|"module", "target", "args"}, `env` its whole environment,
    `hook` the trial's sitecustomize to run first, `base_path` what follows the script's
    directory and PYTHONPATH on sys.path (default: the fork server's)."""
    import atexit
    import tempfile

    kind, target = request.get("kind"), str(request.get("target", ""))
    args = [str(a) for a in request.get("args", [])]
    if request.get("shell"):  # as the `sh -c` a fresh trial's string entrypoint runs in
        env = {**env, "PWD": os.getcwd()}
    os.environ.clear()
    os.environ.update(env)
    time.tzset()  # TZ is the trial's
    atexit._clear()
    tempfile.tempdir = None  # TMPDIR is the trial's
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    threads_from_environment(env)
    reseed()
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.getcwd() if kind == "module" else os.path.dirname(os.path.realpath(target))
    # the new entries get their finders when first looked in; the base's stay (a finder
    # sees its directory change by its mtime), so nothing is listed again
    sys.path[:] = [first, *extra, *(BASE_PATH if base_path is None else base_path)]
    executable = str(request.get("executable") or "")
    if executable:  # the Python as the trial's PATH found it (the same binary and venv)
        sys.executable = executable
        spawn = sys.modules.get("multiprocessing.spawn")
        if spawn is not None:
            spawn.set_executable(executable)
    sys.orig_argv = [str(request.get("python") or sys.executable),
                     *(["-m", target] if kind == "module" else [target]), *args]
    if hook is not None:
        hook._main(hidden=False)
    main = ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        if kind == "module":
            import runpy

            sys.argv = [target, *args]  # runpy puts the module's file in argv[0]
            runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]
        else:
            sys.argv = [target, *args]
            from importlib.machinery import SourceFileLoader

            main.__dict__.update(__file__=os.path.abspath(target), __cached__=None,
                                 __spec__=None, __package__=None,
                                 __loader__=SourceFileLoader("__main__", target))
            with io.open_code(target) as f:
                source = f.read()
            exec(compile(source, target, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        code = exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as python: dies of SIGINT
        code = 130
    except BaseException as exc:  # noqa: BLE001 - the trial's failure, shown as python shows it
        with contextlib.suppress(BaseException):
            sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    finish()
    return code


def finish() -> None:
    """What an interpreter does at exit before finalisation: join non-daemon threads, run the
    atexit handlers, flush stdout and stderr."""
    import atexit

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    flush()


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            if stream is not None:
                stream.flush()


def exit_code(exc: SystemExit) -> int:
    """As the interpreter: None is 0, an int itself, anything else printed to stderr and 1."""
    value = exc.code
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    with contextlib.suppress(BaseException):
        print(value, file=sys.stderr)
    return 1


def threads_from_environment(env: dict[str, str]) -> None:
    """OMP/MKL thread counts are read by the OpenMP runtime when torch loads (in the server):
    the trial's own applied to torch here, before its first parallel op."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        with contextlib.suppress(ValueError, TypeError, RuntimeError):
            n = int(env.get(name, "").split(",")[0])
            if n > 0:
                torch.set_num_threads(n)
                return


def reseed() -> None:
    """Every secret and seed a new interpreter draws at start, drawn again: `random` reseeds
    itself at fork; numpy's global generator and torch's CPU generator (a fresh process seeds
    it from the OS; CUDA's stay lazy, as in a fresh one) are reseeded, and multiprocessing's
    authkey (what its managers and listeners trust) is new: a child of the fork server would
    otherwise share it with every other child, and any of them could run code in its
    managers."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        with contextlib.suppress(BaseException):
            numpy_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(BaseException):
            torch.default_generator.seed()
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        process.current_process().authkey = os.urandom(32)


