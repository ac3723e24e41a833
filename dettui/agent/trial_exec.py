"""The last step before a trial's entrypoint: the trial's environment applied at its exec.

A user's `environment.environment_variables` (PATH, LD_PRELOAD, BASH_ENV...) must reach the
trial and nothing that runs before it: the sandbox's setup runs as root (or as root of a user
namespace, before the master's state is covered), and a PATH of the user's would run the
context's `bin/mount` there, an LD_PRELOAD the user's library in every root binary. So the
agent starts the sandbox with a fixed environment (`sandbox.stage_environment`) and writes the
trial's into a file of the allocation's run dir (0600, handed to the trial's user with the
dir); after `setpriv` has become the trial's user, this file, run by path with an isolated
interpreter (`python -I -S trial_exec.py FILE -- argv...`), reads it, removes it, and execs
the entrypoint with exactly that environment, looked up on the trial's own PATH. The values
never stand in a command line (`ps` shows them to every user).

Standard library only, no import of dettui: it runs before anything of the trial's, with no
site packages.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence

FILE_NAME = ".dettui-environment"  # in the allocation's run dir


def write(path: str | os.PathLike[str], env: Mapping[str, str]) -> None:
    """The environment, as NUL-separated NAME=value, in a new file only its owner reads
    (ValueError naming a variable that holds a NUL, which no environment can)."""
    for name, value in env.items():
        if "\0" in name or "\0" in value or "=" in name or not name:
            raise ValueError(f"environment variable {name[:40]!r} cannot be set: a NUL "
                             "character or a name that is empty or holds '='")
    data = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def read(path: str | os.PathLike[str]) -> dict[str, str]:
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for item in data.split(b"\0"):
        name, sep, value = item.decode(errors="surrogateescape").partition("=")
        if sep and name:
            out[name] = value
    return out


def command(python: str, env_file: str, argv: Sequence[str]) -> list[str]:
    """What runs `argv` with the environment in `env_file` (a path as the trial sees it)."""
    return [python, "-I", "-S", os.path.abspath(__file__), env_file, "--", *argv]


def main(args: Sequence[str]) -> int:
    """`FILE -- argv...`: exec argv with FILE's environment; 127 (126) when it cannot."""
    if len(args) < 3 or args[1] != "--":
        print("usage: trial_exec.py FILE -- COMMAND...", file=sys.stderr)
        return 2
    env_file, argv = args[0], list(args[2:])
    try:
        env = read(env_file)
    except OSError as exc:
        print(f"dettui: cannot read the trial's environment: {exc}", file=sys.stderr)
        return 126
    with contextlib.suppress(OSError):  # the trial has it in its environment: no copy stays
        os.unlink(env_file)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError as exc:
        print(f"dettui: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"dettui: cannot run {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 126
    return 126  # not reached: execvpe returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
