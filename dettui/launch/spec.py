"""Pure launch-command builders: what each launcher runs, as data, printable for --dry-run."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

LEGACY_TRIAL = re.compile(r"^[a-zA-Z0-9_.]+:[a-zA-Z0-9_]+$")
C10D_PORT = 29400
RENDEZVOUS = "DETTUI_RENDEZVOUS"  # a multi-node allocation's topology, as JSON (Topology)


class LaunchArgsError(ValueError):
    """Bad launcher arguments; `code` is the exit status Determined uses for the same mistake."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Topology:
    """Where this node sits in the allocation (from the agent's environment)."""

    addresses: tuple[str, ...] = ("127.0.0.1",)  # chief first
    node_rank: int = 0
    slots_per_node: tuple[int, ...] = (1,)
    port: int = C10D_PORT

    @property
    def nnodes(self) -> int:
        return len(self.addresses)

    @property
    def nproc(self) -> int:
        return max(1, self.slots_per_node[self.node_rank])

    def to_env(self) -> dict[str, str]:
        """The environment `from_env` reads this back from (what the master gives each node of
        a multi-node allocation): the rendezvous, and the chief's address."""
        return {RENDEZVOUS: json.dumps({"addresses": list(self.addresses), "rank": self.node_rank,
                                        "slots": list(self.slots_per_node), "port": self.port}),
                "DET_CHIEF_IP": self.addresses[0]}

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Topology:
        raw = env.get(RENDEZVOUS)
        if raw:
            info = json.loads(raw)
            return cls(tuple(info["addresses"]), int(info["rank"]),
                       tuple(int(s) for s in info["slots"]), int(info.get("port", C10D_PORT)))
        slots = json.loads(env.get("DET_SLOT_IDS", "[0]")) or [0]
        port = env.get("DETTUI_C10D_PORT") or env.get("C10D_PORT") or C10D_PORT
        return cls(("127.0.0.1",), 0, (len(slots),), int(port))


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def render(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Everything before the first `--` is overrides, the rest the script (Determined's rule)."""
    args = list(argv)
    if "--" in args:
        i = args.index("--")
        return args[:i], args[i + 1:]
    return [], args


def script_of(rest: Sequence[str], python: str = "python3") -> list[str]:
    """`--trial m:T` -> the trial harness; otherwise the script itself."""
    rest = list(rest)
    if rest[:1] == ["--trial"]:
        if len(rest) < 2:
            raise LaunchArgsError("error: --trial needs a TRIAL argument (module:Class)")
        if len(rest) > 2:
            raise LaunchArgsError(f"error: extra arguments to --trial: {rest[2:]}")
        return [python, "-m", "dettui.launch.harness", rest[1]]
    if not rest:
        raise LaunchArgsError("error: empty script is not allowed")
    if rest[0].startswith("-"):
        raise LaunchArgsError(f"unrecognized arguments: {' '.join(rest)}", code=2)
    return rest


def torchrun_command(
    overrides: Sequence[str], script: Sequence[str], topo: Topology, python: str = "python3"
) -> Command:
    """torchrun with our defaults; overrides given by the user win (they come last)."""
    master_addr = "localhost" if topo.nnodes == 1 else topo.addresses[0]
    argv = [
        python, "-m", "torch.distributed.run",
        "--nnodes", str(topo.nnodes), "--nproc_per_node", str(topo.nproc),
        "--node_rank", str(topo.node_rank), "--max_restarts", "0",
        "--master_addr", master_addr, "--master_port", str(topo.port),
        *overrides,
        "--no-python", python, "-m", "dettui.launch.worker", "--", *script,
    ]
    env = {"USE_TORCH_DISTRIBUTED": "True", "DET_CHIEF_IP": topo.addresses[0]}
    return Command(tuple(argv), env)


def entrypoint_argv(entrypoint: str | Sequence[str], python: str = "python3") -> list[str]:
    """Determined's exec/launch.py rules.

    A legacy `module:TrialClass` runs under `determined.launch.torch_distributed --trial` (the
    real package's launcher and harness where the trial's Python has them, else dettui's);
    another string runs with `sh -c`; a list is exec'd as it is. Determined's own launchers
    (`python3 -m determined.launch.torch_distributed ...`) are left as written: the real
    package runs them where the trial's Python has it, dettui's launchers under the same
    names where it does not (`dettui.launch.alias`).
    """
    if isinstance(entrypoint, str):
        text = entrypoint.strip()
        if not text:
            raise LaunchArgsError("the experiment has no entrypoint")
        if LEGACY_TRIAL.match(text):  # as Determined's exec/launch.py
            return [python, "-m", "determined.launch.torch_distributed", "--trial", text]
        return ["sh", "-c", text]
    argv = [str(a) for a in entrypoint]
    if not argv:
        raise LaunchArgsError("the experiment has no entrypoint")
    return argv


PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")
# Words a shell command may start with before the program it runs
_PREFIX_WORDS = {"exec", "env", "command", "nohup", "time"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_SEPARATORS = set(";&|()")  # what a shell's command lists are made of


def named_python(entrypoint: str | Sequence[str]) -> str | None:
    """The Python an entrypoint runs by absolute path (`/opt/venv/bin/python3 -m ...`, in any
    command of a shell line, or first in a list), or None: the trial's other processes (a
    launcher's `python3` workers) are to run it too."""
    if isinstance(entrypoint, str):
        return _python_in_shell(entrypoint)
    argv = [str(a) for a in entrypoint]
    if len(argv) >= 3 and posixpath.basename(argv[0]) in ("sh", "bash") and argv[1] == "-c":
        return _python_in_shell(argv[2])
    return argv[0] if argv and _is_python(argv[0]) else None


def _python_in_shell(text: str) -> str | None:
    lexer = shlex.shlex(text.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: sh will say so
        return None
    command_start = True
    for word in words:
        if set(word) <= _SEPARATORS:
            command_start = True
        elif command_start and (word in _PREFIX_WORDS or _ASSIGNMENT.fullmatch(word)):
            continue
        elif command_start:
            if _is_python(word):
                return word
            command_start = False
    return None


def _is_python(program: str) -> bool:
    return posixpath.isabs(program) and PYTHON_NAME.fullmatch(posixpath.basename(program)) \
        is not None


def trial_path(chosen: str | None, python: str | None, default: str) -> str:
    """The trial's PATH: the experiment's own (`chosen`, from its environment_variables) as it
    is, else `default` (the agent's); and first the directory of the Python the entrypoint
    names by absolute path, so that every `python3` of the trial is that one."""
    path = default if chosen is None else chosen
    if python is None:
        return path
    where = posixpath.dirname(python)
    if path.split(":", 1)[0] == where:
        return path
    return f"{where}:{path}" if path else where


STARTUP_HOOK = "startup-hook.sh"
# As Determined's entrypoint.sh: the hook is sourced (its exports reach the entrypoint) under
# `set -e` (a failing command in it fails the trial), then the entrypoint replaces the shell.
_HOOK_SCRIPT = 'set -e; . "./$0"; set +e; exec "$@"'


def with_startup_hook(argv: Sequence[str], shell: str = "sh") -> list[str]:
    """`argv` run after `startup-hook.sh` of the context root is sourced by `shell`: bash
    where the machine has it, as Determined's entrypoint.sh (`#!/bin/bash`) sources it, so
    hooks may use `[[ ]]`, arrays, `source` and `pipefail`."""
    return [shell, "-c", _HOOK_SCRIPT, STARTUP_HOOK, *argv]
