"""The file of the model context an entrypoint runs, checked when the experiment is created: a
typo (`python3 trian.py`) would otherwise be accepted and fail on an agent max_restarts + 1
times before the experiment ends in ERROR.

Only what surely names a path inside the context is checked, as the trial runs it (from the
context's root): `python3 x.py` (after Python's own options), `x.py` and `./x`, `python3 -m
pkg.mod` when `pkg` is in the context (else it may be an installed module), a legacy
`module:Trial` and `--trial module:Trial`; through Determined's and dettui's launchers
(`python3 -m determined.launch.torch_distributed [OVERRIDES... --] SCRIPT...`). Anything else is
left alone, so a check never refuses what could run: shell syntax (`cd x && ...`, `$VAR`),
other programs (`sh -c`, `torchrun`), absolute paths, paths out of the context, and any
entrypoint of a context with a startup hook (it may make the file). Pure.
"""

from __future__ import annotations

import difflib
import heapq
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from dettui.launch.spec import LEGACY_TRIAL
from dettui.terminal_text import escape

STARTUP_HOOK = "startup-hook.sh"
SHELL_SYNTAX = set("|&;<>()$`\\*?[]{}~!#\n\r")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# Python's options that take a value in the next argument, and those that take none
PYTHON_VALUE_OPTIONS = {"-W", "-X", "--check-hash-based-pycs"}
PYTHON_FLAGS = set("bBdEhiIOPqsSuvVx")
LAUNCHERS = {f"{top}.launch.{name}" for top in ("determined", "dettui")
             for name in ("torch_distributed", "deepspeed", "horovod", "tensorflow")}
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
MAX_DEPTH = 4  # launchers within launchers
MAX_SUGGESTION_CANDIDATES = 500  # names a did-you-mean compares (difflib is slow)
MAX_SUGGESTED = 256  # characters of a name a did-you-mean compares or suggests
MAX_SHOWN = 200  # characters of a name the message shows


@dataclass(frozen=True)
class Context:
    """The paths of a model context (relative to its root): its files, and its directories
    (given; those a file's path implies are found by its prefix).

    No index is built: the largest context (100,000 paths of 1 KB) is 100 MB of names, which
    hashing alone takes a fifth of a second; a lookup compares them instead. A path is taken in
    normal form, but for a leading `./` or a trailing `/` (normalised here, cheaply); a nested
    name missing from the normal forms is looked for among the other odd forms (`a//b.py`,
    `a/./b.py`) before it is called missing."""

    files: tuple[str, ...]
    dirs: tuple[str, ...]

    @classmethod
    def of(cls, entries: Iterable[tuple[str, bool]]) -> Context:
        """From (path, is_directory) pairs, paths relative to the context's root."""
        files: list[str] = []
        dirs: list[str] = []
        for path, is_dir in entries:
            if path.startswith(("./", "/")) or path.endswith(("/", "/.")):
                path = posixpath.normpath(path)
            (dirs if is_dir else files).append(path)
        return cls(tuple(files), tuple(dirs))

    def has_file(self, path: str) -> bool:
        return path in self.files or self._found(self.files, path, lambda p: p == path)

    def has_path(self, path: str) -> bool:
        inside = f"{path}/"
        return path in self.files or path in self.dirs or self._found(
            self.files + self.dirs, path, lambda p: p == path or p.startswith(inside))

    def has_dir(self, path: str) -> bool:
        """A directory given, or one that a path inside it implies."""
        inside = f"{path}/"
        return self._found(self.dirs, path, lambda p: p == path) or \
            self._found(self.files + self.dirs, path, lambda p: p.startswith(inside))

    def has_module(self, module: str) -> bool:
        """Whether `import module` finds it here: a module file, a package or a directory."""
        path = module.replace(".", "/")
        if self.has_dir(path):
            return True
        parent, name = posixpath.split(path)
        prefix = f"{parent}/{name}." if parent else f"{name}."
        return self._found(self.files, path,
                           lambda p: p.startswith(prefix) and p.endswith(MODULE_SUFFIXES)
                           and "/" not in p[len(prefix):])

    @staticmethod
    def _found(paths: tuple[str, ...], sought: str, test: Callable[[str], bool]) -> bool:
        """Whether `test` holds for one of `paths`. Any other form of a path that passes holds
        `sought`'s last part: for a nested `sought`, those paths are normalised and tested."""
        if any(map(test, paths)):
            return True
        if "/" not in sought:  # a root-level name's odd forms start `./` or end `/`: done
            return False
        part = posixpath.basename(sought)
        return any(test(posixpath.normpath(p)) for p in paths
                   if part in p and ("//" in p or "/." in p))


@dataclass(frozen=True)
class _Need:
    """A path the entrypoint runs, or a module it imports."""

    name: str
    module: bool = False
    maybe_installed: bool = False  # `-m`: checked only when its top package is in the context


def missing(entrypoint: str | Sequence[str] | None,
            entries: Iterable[tuple[str, bool]]) -> str | None:
    """The sentence naming the entrypoint's file missing from the context, or None (present,
    or nothing that surely is a path in the context). `entries` as Context.of takes them."""
    context = Context.of(entries)
    if not context.files and not context.dirs:
        return None  # no context at all (an API client's experiment): nothing to check against
    if context.has_file(STARTUP_HOOK):
        return None
    for need in _needs(entrypoint):
        if need.module:
            if need.maybe_installed and not context.has_module(need.name.split(".")[0]):
                continue
            if not context.has_module(need.name):
                return _say_module(need.name, context)
        elif not context.has_path(need.name):
            return _say_path(need.name, context)
    return None


def _needs(entrypoint: str | Sequence[str] | None) -> list[_Need]:
    if isinstance(entrypoint, str):
        text = entrypoint.strip()
        if LEGACY_TRIAL.match(text):
            return [_Need(text.split(":", 1)[0], module=True)]
        if SHELL_SYNTAX & set(text):
            return []
        try:
            argv = shlex.split(text)
        except ValueError:
            return []
        while argv and ENV_ASSIGNMENT.match(argv[0]):
            argv = argv[1:]
        return _command(argv, 0)
    if isinstance(entrypoint, Sequence):
        return _command([str(a) for a in entrypoint], 0)
    return []


def _command(argv: list[str], depth: int) -> list[_Need]:
    if not argv or depth > MAX_DEPTH:
        return []
    program = argv[0]
    if PYTHON.match(posixpath.basename(program)):
        return _python(argv[1:], depth)
    path = _context_path(program)
    if path is not None and (program.endswith(".py") or "/" in program):
        return [_Need(path)]
    return []


def _python(args: list[str], depth: int) -> list[_Need]:
    """After `python3`: its options, then a script, `-m module` or `-c` (nothing to check)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "-") or arg.startswith("-c"):
            return []
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = arg[2:] or (args[i + 1] if i + 1 < len(args) else "")
            rest = args[i + (1 if arg[2:] else 2):]
            return _module(module, rest, depth)
        if arg in PYTHON_VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith(("-W", "-X")) or (
                arg.startswith("-") and not arg.startswith("--") and set(arg[1:]) <= PYTHON_FLAGS
                and len(arg) > 1):
            i += 1
            continue
        if arg.startswith("-"):
            return []  # an option this check does not know: no guess
        path = _context_path(arg)
        return [_Need(path)] if path is not None else []
    return []


def _module(module: str, rest: list[str], depth: int) -> list[_Need]:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", module):
        return []
    if module in LAUNCHERS:
        return _launcher(rest, depth)
    return [_Need(module, module=True, maybe_installed=True)]


def _launcher(args: list[str], depth: int) -> list[_Need]:
    """`[OVERRIDES... --] (--trial TRIAL)|(SCRIPT...)`, as Determined's launchers read it."""
    if "--" in args:
        args = args[args.index("--") + 1:]
    while args and args[0].startswith("-"):
        if args[0] == "--trial" and len(args) == 2 and LEGACY_TRIAL.match(args[1]):
            return [_Need(args[1].split(":", 1)[0], module=True)]
        if args[0] == "--autohorovod":
            args = args[1:]
        elif args[0] == "--port":
            args = args[2:]
        else:
            return []
    return _command(args, depth + 1)


def _context_path(token: str) -> str | None:
    """`token` as a path relative to the context's root, or None when it is not one (absolute,
    leaving the context, empty)."""
    if not token or token.startswith("/"):
        return None
    norm = posixpath.normpath(token)
    if norm == "." or norm == ".." or norm.startswith("../"):
        return None
    return norm


def _say_path(path: str, context: Context) -> str:
    suffix = posixpath.splitext(path)[1]
    candidates = (f for f in _short(context.files, 0) if f.endswith(suffix))
    return (f"entrypoint names {_shown(path)}, which is not in the context"
            f"{_did_you_mean(path, candidates)}")


def _say_module(module: str, context: Context) -> str:
    path = module.replace(".", "/")
    candidates = (f[:-3].replace("/", ".").removesuffix(".__init__")
                  for f in _short(context.files, len(".__init__.py")) if f.endswith(".py"))
    return (f"entrypoint names module {_shown(module)} ({_shown(path)}.py or "
            f"{_shown(path)}/__init__.py), which is not in the context"
            f"{_did_you_mean(module, candidates)}")


def _short(paths: Iterable[str], extra: int) -> Iterator[str]:
    """The paths that may be suggested (`extra`: characters they lose on the way), normal."""
    for p in paths:
        if len(p) <= MAX_SUGGESTED + extra:
            yield posixpath.normpath(p)


def suggestion_candidates(name: str, names: Iterable[str]) -> list[str]:
    """The few of `names` worth comparing with `name` for a did-you-mean (difflib's ratio is
    slow on many or long names): none if `name` is longer than MAX_SUGGESTED; else those no
    longer, of a length that can reach the 0.6 cutoff (the shorter at least 3/7 of the longer
    one), at most MAX_SUGGESTION_CANDIDATES, those in `name`'s directory first, then those
    nearest its length."""
    size = len(name)
    if size > MAX_SUGGESTED:
        return []
    low, high = (3 * size + 6) // 7, min(MAX_SUGGESTED, (7 * size) // 3)
    fit = [n for n in names if low <= len(n) <= high and n != name]
    if len(fit) <= MAX_SUGGESTION_CANDIDATES:
        return fit
    folder = name.rpartition("/")[0]
    return heapq.nsmallest(MAX_SUGGESTION_CANDIDATES, fit,
                           key=lambda n: (n.rpartition("/")[0] != folder, abs(len(n) - size)))


def _did_you_mean(name: str, names: Iterable[str]) -> str:
    candidates = suggestion_candidates(name, names)
    close = candidates and difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean {_shown(close[0])}?)" if close else ""


def _shown(name: str) -> str:
    """A name as the message shows it: control characters visible, at most MAX_SHOWN long."""
    name = escape(name).replace("\t", "\\t").replace("\n", "\\n")
    return name if len(name) <= MAX_SHOWN else name[:MAX_SHOWN - 1] + "…"
