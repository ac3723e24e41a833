"""Which trials a fork server may start: the parts of that decision that need no agent (the
entrypoint's shape, the environment), shared by the agent (agent/forkpool.py) and the dry run
(launch/dryrun.py). Pure: standard library only."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SHELL_SYNTAX = set("$`\\*?[]{}~;&|<>()!#\n\t")  # a string entrypoint holding any: run by sh
# Variables a fresh interpreter reads at start-up that a forked child cannot honour: a trial
# whose environment sets one starts fresh.
STARTUP_ONLY = ("PYTHON",)
HONOURED = {"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONBREAKPOINT"}
LOADER_VARS = ("LD_PRELOAD", "LD_AUDIT")


@dataclass(frozen=True)
class Run:
    """What a forked child runs: `kind` script or module, its target and arguments, and the
    command as written (what `ps` shows of it)."""

    kind: str
    target: str
    args: tuple[str, ...]
    title: str = ""
    executable: str = ""  # the Python as found on the trial's PATH (its sys.executable)


def entry_words(argv: Sequence[str]) -> tuple[list[str] | None, str]:
    """The words of a simple command `argv` runs (a `sh -c` line without shell syntax, or a
    list), or why it is not one."""
    words = list(argv)
    if len(words) >= 3 and words[0] == "sh" and words[1] == "-c":
        text = words[2]
        if len(words) > 3:
            return None, "the entrypoint passes arguments to sh"
        odd = sorted(set(text) & SHELL_SYNTAX)
        if odd:
            return None, f"the entrypoint is a shell line (it holds {''.join(odd)[:8]!r})"
        try:
            words = shlex.split(text)
        except ValueError:
            return None, "the entrypoint's quotes are unbalanced"
        if words and "=" in words[0]:
            return None, "the entrypoint sets a variable first"
    if not words:
        return None, "the entrypoint is empty"
    return words, ""


def env_reason(env: Mapping[str, str], agent_env: Mapping[str, str]) -> str | None:
    """A variable of the trial's environment that only a new interpreter can honour: one
    Python reads at its start (PYTHON*), the dynamic loader's, or one read when the server
    started (locale, torch's TORCH_*, the OpenMP and MKL runtimes') whose value differs from
    the agent's, which the server was started with (`server_environment`). Thread counts
    and TZ are applied to the forked child (inproc.run)."""
    for name in sorted(env):
        if name.startswith(STARTUP_ONLY) and name not in HONOURED:
            return f"{name} is set (read only when an interpreter starts)"
        if name in LOADER_VARS and env[name]:
            return f"{name} is set"
    if env.get("LD_LIBRARY_PATH", "") != agent_env.get("LD_LIBRARY_PATH", ""):
        return "LD_LIBRARY_PATH differs from the agent's"
    for name in sorted({*env, *agent_env}):
        if read_at_start(name) and env.get(name) != agent_env.get(name):
            return f"{name} differs from the agent's (read when torch or Python starts)"
    return None


# read by the interpreter (locale) or by torch and its OpenMP/MKL runtimes when they load
AT_START_PREFIXES = ("LC_", "TORCH_", "OMP_", "MKL_", "KMP_", "GOMP_")
AT_START = {"LANG"}
APPLIED = {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}  # applied to torch in the child


def read_at_start(name: str) -> bool:
    return (name in AT_START or name.startswith(AT_START_PREFIXES)) and name not in APPLIED


def server_environment(agent_env: Mapping[str, str]) -> dict[str, str]:
    """What of the agent's environment a fork server starts with (the administrator's, never
    a user's): the variables `env_reason` compares a trial's with."""
    return {k: v for k, v in agent_env.items()
            if read_at_start(k) or k == "LD_LIBRARY_PATH" and v}


def split_run(words: Sequence[str], workdir: Path) -> tuple[Run | None, str]:
    """`python [-u] SCRIPT ARGS` or `python [-u] -m MODULE ARGS` (words[0] the Python), or why
    not: another option, or a script that is not a file of the context."""
    rest = list(words[1:])
    while rest[:1] == ["-u"]:
        rest = rest[1:]
    if rest[:1] == ["-m"] and len(rest) >= 2:
        return Run("module", rest[1], tuple(rest[2:]), shlex.join(words)), ""
    if not rest or rest[0].startswith("-"):
        return None, f"python runs with the option {rest[0] if rest else '(none)'}"
    script = workdir / rest[0]
    if not script.is_file():
        return None, f"{rest[0]} is not a file of the context"
    if not script.resolve().is_relative_to(workdir.resolve()):
        return None, f"{rest[0]} lies outside the context"
    return Run("script", rest[0], tuple(rest[1:]), shlex.join(words)), ""


def interpreter(path: str) -> tuple[str, str]:
    """What a Python executable runs as: its real binary, and the venv it starts in (the
    directory holding pyvenv.cfg next to it or above it, as the interpreter looks; "" none).
    A venv's python is a link to the system's: the same binary, other packages."""
    where = os.path.dirname(os.path.abspath(path))
    venv = next((d for d in (where, os.path.dirname(where))
                 if os.path.isfile(os.path.join(d, "pyvenv.cfg"))), "")
    return os.path.realpath(path), os.path.realpath(venv) if venv else ""


def fresh_start_modules(site_dir: str) -> set[str]:
    """The top-level modules a fresh trial has imported before its script runs (the
    interpreter's start and the trial's site hook): a file of the trial's by one of these
    names is not imported by a fresh start either, so it does not stop a fork."""
    env = {"PATH": os.environ.get("PATH", ""), **({"PYTHONPATH": site_dir} if site_dir else {})}
    try:
        out = subprocess.run([sys.executable, "-c", "import sys; print(' '.join(sys.modules))"],
                             capture_output=True, text=True, env=env, cwd="/", timeout=60,
                             stdin=subprocess.DEVNULL, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {n.split(".", 1)[0] for n in out.split()}
