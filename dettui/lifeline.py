"""Children that die with their parent, even when it is killed with SIGKILL: the parent-death
signal (PR_SET_PDEATHSIG), armed before the child runs anything. Used for everything the master
and the agent start (worker processes, allocations).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child (a `preexec_fn`, or its first line): get SIGKILL when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def orphaned(parent: int) -> bool:
    """After `die_with_parent` in a child: whether `parent` had already died before the signal
    was armed (then it never comes, and the child must end by itself)."""
    return os.getppid() != parent


@functools.cache
def pdeathsig_prefix() -> tuple[str, ...]:
    """`setpriv --pdeathsig KILL --` if this machine's setpriv has it (util-linux >= 2.33), else
    (): the parent-death signal armed by a tiny program before the command's own start-up (a
    Python child otherwise runs for a while, seconds on a loaded machine, before it can arm it),
    and without a `preexec_fn`, which makes subprocess fork() the whole parent (~10 ms at 60 MB,
    blocking its event loop) instead of vfork() (~0.3 ms)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or not shutil.which("true"):
        return ()
    try:
        probe = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], timeout=10,
                               stdin=subprocess.DEVNULL, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    return (setpriv, "--pdeathsig", "KILL", "--") if probe.returncode == 0 else ()
