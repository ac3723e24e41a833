"""Each allocation's processes run in Linux namespaces of their own, set up with util-linux's
`unshare` and `setpriv` (no containers, no new dependency), as an unprivileged Unix user:

- a PID namespace: the entrypoint is its init, so when the allocation ends (or the agent dies:
  the agent's parent-death signal ends `unshare`, whose --kill-child ends the init) every process
  in it ends, however it double-forked or re-parented itself, and it sees no host process;
- a mount namespace in which the paths the trial must not read (the master's state dir with its
  database, the agent's work root with other allocations, the dettui config dir with tokens) are
  covered by empty read-only tmpfs, with only what the trial needs bound back: its own work dir
  and its checkpoint storage. Directories the trial's user could not pass anyway (/root, a
  0700 temporary dir) are covered the same way, with the Python that runs the trial bound back
  (a venv the entrypoint names: by its resolved path, bound as given and only when no user can
  swap a directory on its way, `allocation.venv_of`; a link of a user's resolved again here
  would name, by then, what the cover closes); checkpoint storage by its real path and
  identity as the agent checked it (`trialuser.pin`): a bind keeps its source's st_dev:st_ino,
  so after each bind the setup compares them and refuses the trial on a mismatch (a user's
  link or directory swapped between the check and the bind);
- a /dev/shm of the allocation's own (tmpfs, sticky as the host's), and TMPDIR a directory of
  its own in its run dir: a trial cannot plant files where another user's trial will look
  (torch's $TMPDIR/torchinductor_<user>, say). The host's /tmp stays visible (data, and paths
  users name live there), so what a program puts in /tmp by a fixed name is as shared as on
  any multi-user machine;
- in that namespace, Determined's container paths (`runinfo.mounts`): the allocation's run dir
  with its info files at /run/determined, the work dir at /run/determined/workdir, shared_fs
  storage at /determined_shared_fs. Where /run cannot be written (a user namespace without
  root), a tmpfs goes over /run with its entries bound back, so /run/determined can be made;
- then `setpriv` becomes the trial's user (a root agent: the owner's linked user, or the
  default trial user; see trialuser.py) with no capabilities at all (an empty bounding set),
  `no_new_privs` and a process limit (RLIMIT_NPROC), and execs the entrypoint. Without
  capabilities the trial cannot undo a mount, and the state dir, keys and other users' run dirs
  are closed to it by their modes (0700, 0600) as well: a mount is not a boundary against root.

A trial the fork server forks gets the same sandbox made with system calls in its own process
(`plan`, then `nsetup.enter`), from the same `layout` as the script's arguments.

The sandbox runs with a fixed environment (`stage_environment`: the system's PATH, the
allocation's marks, the script and its arguments), never the trial's: its setup runs as root,
and a user's PATH or LD_PRELOAD would run the user's files there. The trial's environment is
applied at the entrypoint's exec, after `setpriv` (trial_exec.py).

A non-root agent makes the namespaces inside a user namespace of its own (the trial is "root"
there, with no capabilities, and its mounts locked). Where no namespace can be made, the agent
refuses to run trials unless started with `--no-sandbox` (or DETTUI_NO_SANDBOX set), which it
prints at start and shows in `agent list`; allocations then run as plain process groups with a
parent-death signal, swept at agent start.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dettui.agent import nsetup, runinfo
from dettui.agent.trialuser import Pinned, TrialUser, readable, unreachable, unswappable
from dettui.errors import DettuiError
from dettui.launch import sitedir

OFF_SWITCH = "DETTUI_NO_SANDBOX"  # set (to anything): as --no-sandbox
# Where the sandbox's setup (as root) finds mount, mkdir, setpriv...: the system's own
# directories, never a PATH of the agent's or a user's (relative entries would resolve in the
# work dir, which holds the user's context).
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
STAGE_TEMPLATE = "/tmp/.dettui-stage.XXXXXX"  # mktemp's template of the dir kept paths wait in
NO_IDENTITY = nsetup.NO_IDENTITY  # a bind the setup does not check (the agent's own paths)
PRIVATE = "/dev/shm"  # the allocation's own, once /run/determined is there

# Run as the init of the new namespaces: place the mounts, stage what is kept, cover what is
# hidden, put what is kept back, then become the entrypoint. It comes in the environment, not
# as an argument, so that `ps` shows a short line (`... sh -c eval "$DETTUI_SANDBOX_SCRIPT"
# dettui-sandbox trial 3`) instead of 2.5 KB of shell; its arguments, shell-quoted, too:
# N_HIDDEN hidden... N_MOUNTS (source target identity)... (kept identity)... -- argv...
# An identity ("st_dev:st_ino", or NO_IDENTITY) is what a source was when the agent checked
# it: a bind mount keeps its source's, so a source swapped since is refused after its bind.
SCRIPT_VAR, ARGS_VAR = "DETTUI_SANDBOX_SCRIPT", "DETTUI_SANDBOX_ARGS"
STAGE_VAR, CWD_VAR = "DETTUI_SANDBOX_STAGE", "DETTUI_SANDBOX_CWD"
RUN_SCRIPT = f'eval "${SCRIPT_VAR}"'
SCRIPT = r"""
set -e
eval "set -- $DETTUI_SANDBOX_ARGS"
STAGE=$DETTUI_SANDBOX_STAGE
CWD=$DETTUI_SANDBOX_CWD
unset DETTUI_SANDBOX_ARGS DETTUI_SANDBOX_STAGE DETTUI_SANDBOX_CWD
n=$1; shift
hidden=""; i=0
while [ "$i" -lt "$n" ]; do hidden="$hidden
$1"; shift; i=$((i + 1)); done
n=$1; shift
binds=""; i=0
while [ "$i" -lt "$n" ]; do binds="$binds
$1
$2
$3"; shift 3; i=$((i + 1)); done
kept=""
while [ "$1" != "--" ]; do kept="$kept
$1
$2"; shift 2; done
shift
same() {  # $1 a bind just made of $3, $2 what $3 was when the agent checked it (- unchecked)
  if [ "$2" = - ] || [ "$(stat -c %d:%i -- "$1")" = "$2" ]; then return 0; fi
  umount -l "$1" 2>/dev/null || true
  printf 'checkpoint storage %s changed while the trial started; refusing\n' "$3" >&2
  exit 1
}
mount --make-rprivate /
TMPSTAGE=$STAGE
STAGE=$(mktemp -d "$TMPSTAGE")
mount -t tmpfs -o mode=0700,size=64k dettui-stage "$STAGE"
IFS='
'
open_run() {  # /run is not writable here: a tmpfs over it, its entries bound back
  mkdir -p "$STAGE/run"
  mount --rbind /run "$STAGE/run"
  mount -t tmpfs -o mode=0755 dettui-run /run
  for e in "$STAGE"/run/* "$STAGE"/run/.[!.]*; do
    b="/run/${e##*/}"
    if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$b"; continue; fi
    if [ -d "$e" ]; then [ -e "$b" ] || mkdir "$b"
    elif [ -e "$e" ]; then : > "$b"; else continue; fi
    mount --rbind "$e" "$b" 2>/dev/null || true
  done
}
src=""; dst=""
for x in $binds; do
  if [ -z "$src" ]; then src=$x; continue; fi
  if [ -z "$dst" ]; then dst=$x; continue; fi
  if ! mkdir -p "$dst" 2>/dev/null; then
    case "$dst" in /run/*) open_run; mkdir -p "$dst" ;; *) src=""; dst=""; continue ;; esac
  fi
  mount --rbind "$src" "$dst"
  same "$dst" "$x" "$src"
  src=""; dst=""
done
umount -l "$STAGE"
rmdir "$STAGE" 2>/dev/null || true
private=""
if [ -d /run/determined ]; then  # kept paths wait outside /tmp (a test's cwd, say)
  STAGE=/run/determined/.stage
  mkdir -p "$STAGE"
  private="/dev/shm"
else
  STAGE=$(mktemp -d "$TMPSTAGE")
fi
mount -t tmpfs -o mode=0700,size=64k dettui-stage "$STAGE"
i=0; k=""
for x in $kept; do
  if [ -z "$k" ]; then k=$x; continue; fi
  i=$((i + 1)); mkdir -p "$STAGE/$i"; mount --rbind "$k" "$STAGE/$i"; same "$STAGE/$i" "$x" "$k"
  k=""
done
for h in $hidden; do mount -t tmpfs -o mode=0755,size=64k dettui-hidden "$h"; done
for p in $private; do
  if [ -d "$p" ]; then mount -t tmpfs -o mode=1777,nosuid,nodev dettui-private "$p"; fi
done
i=0; k=""
for x in $kept; do
  if [ -z "$k" ]; then k=$x; continue; fi
  i=$((i + 1)); mkdir -p "$k"; mount --rbind "$STAGE/$i" "$k"
  k=""
done
for h in $hidden; do mount -o remount,ro,bind "$h" 2>/dev/null || true; done
umount -l "$STAGE"
rmdir "$STAGE" 2>/dev/null || true
cd "$CWD"
unset IFS STAGE TMPSTAGE CWD DETTUI_SANDBOX_SCRIPT
umask 077
"$@"
"""


@dataclass(frozen=True)
class Support:
    """What this machine lets the agent do: `prefix` starts a command in new namespaces (empty
    when it cannot), `note` says why not; `root`: the agent may run trials as other users."""

    prefix: tuple[str, ...]
    note: str | None = None
    root: bool = False

    @property
    def on(self) -> bool:
        return bool(self.prefix)


@functools.cache
def probe() -> Support:
    """Try `unshare` once: as root, or in a user namespace of its own when not root."""
    root = os.geteuid() == 0
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare is None or setpriv is None or not os.path.isabs(unshare):
        return Support((), "util-linux's unshare and setpriv are not both installed", root)
    base = (unshare, "--mount", "--pid", "--fork", "--kill-child", "--mount-proc")
    env = stage_environment({})
    tries = [base] if root else []
    tries.append((unshare, "--user", "--map-root-user", *base[1:]))
    last = ""
    for prefix in tries:
        try:
            res = subprocess.run([*prefix, "--", "sh", "-c", "mount -t tmpfs t /mnt 2>/dev/null "
                                  f"|| mount -t tmpfs t /tmp; exec {' '.join(DROP)} true"],
                                 capture_output=True, timeout=10, stdin=subprocess.DEVNULL,
                                 text=True, env=env)
        except (OSError, subprocess.SubprocessError) as exc:
            last = str(exc)
            continue
        if res.returncode == 0:
            return Support(prefix, None, root)
        lines = (res.stderr or "").strip().splitlines()
        last = lines[-1] if lines else f"exit status {res.returncode}"
    return Support((), f"Linux namespaces are not available here ({last or 'unshare failed'})",
                   root)


def refused(support: Support, no_sandbox: bool) -> str | None:
    """Why this agent must not run trials (no sandbox, and not told to go without), or None."""
    if support.on or no_sandbox or os.environ.get(OFF_SWITCH):
        return None
    return (f"no sandbox can be made for trials: {support.note}. Trials would read the "
            "master's state and keys and signal its processes; install util-linux, run the "
            "agent as root or allow user namespaces (sysctl kernel.unprivileged_userns_clone=1)"
            ", or start the agent with --no-sandbox to run trials unconfined")


def off_note(support: Support, no_sandbox: bool) -> str | None:
    """What `agent list` and the agent's start say when trials run without a sandbox."""
    if no_sandbox or os.environ.get(OFF_SWITCH):
        return "--no-sandbox: trials run unconfined, as process groups without namespaces"
    return None if support.on else support.note


# What the trial's process becomes, after the mounts: no capabilities (an empty bounding set,
# so not even a root trial user gets any at exec), no new privileges through setuid files.
DROP = ("setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
        "--no-new-privs")
DEFAULT_NPROC = 4096  # processes and threads of the trial's Unix user (RLIMIT_NPROC)


def become(support: Support, user: TrialUser | None, nproc: int | None) -> list[str]:
    """The commands that turn the sandbox's root into the trial: its process limit, then its
    user (a root agent only), groups and no capabilities."""
    out: list[str] = []
    change = user is not None and support.root and user.uid != os.geteuid()
    if nproc and change:
        # Counted per Unix user, threads included; never applied to the agent's own user,
        # whose other processes (the master) would count against it.
        out += ["prlimit", f"--nproc={nproc}:{nproc}", "--"]
    if change:
        assert user is not None
        groups = ["--groups", ",".join(map(str, user.groups))] if user.groups else [
            "--clear-groups"]
        # A change of credentials clears the parent-death signal `unshare --kill-child` armed:
        # armed again, or the trial would outlive a SIGKILLed agent.
        out += [*DROP[:1], f"--reuid={user.uid}", f"--regid={user.gid}", *groups,
                "--pdeathsig", "KILL", *DROP[1:], "--"]
    elif support.on or support.root:
        out += [*DROP, "--"]
    return out


def needed_by_python() -> list[Path]:
    """What any trial needs to read besides its own files: the interpreter the agent runs
    trials with, its libraries, and dettui (the trial's sitecustomize and Core API)."""
    import site

    out = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
           Path(os.path.realpath(sys.executable)).parent, Path(sitedir.DIRECTORY).parent.parent}
    with contextlib.suppress(AttributeError):
        out.update(Path(p) for p in site.getsitepackages())
    return sorted(p for p in out if p.is_dir())


def outermost(paths: Sequence[Path]) -> list[Path]:
    """The paths that are not inside another of them (resolved, de-duplicated)."""
    resolved = sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in resolved:
        if not any(p.is_relative_to(o) for o in out):
            out.append(p)
    return out


def covers(hidden: Sequence[Path], kept: Sequence[Path], user: TrialUser | None) -> list[Path]:
    """What the sandbox covers: the hidden paths, and the directories on the way to what is kept
    that the trial's user could not pass (they hold nothing it could read anyway)."""
    out = list(hidden)
    if user is not None:
        out += [u for k in kept if (u := unreachable(k, user)) is not None]
    return [h for h in outermost(out) if h.is_dir() and h != Path("/")]


def under(path: Path, cover: Sequence[Path]) -> bool:
    """Whether `path` lies in one of the covered directories (so must be bound back)."""
    return any(path.is_relative_to(h) for h in cover)


def stage_environment(marks: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of what runs before the trial (the sandbox's setup as root, the
    agent's setpriv and prlimit): the system's PATH and `marks` (the allocation's, by which
    its processes are found), nothing of a user's and nothing else of the agent's."""
    return {"PATH": SYSTEM_PATH, **marks}


@dataclass(frozen=True)
class Launch:
    """A command to start: its argv, and what its environment needs on top of
    `stage_environment` (the sandbox's script and arguments)."""

    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Layout:
    """The sandbox's mounts for one trial, as its setup makes them: `cover` (covered by empty
    read-only tmpfs), `binds` (source, target, identity) placed first, and `keep` (path,
    identity) bound back over what is covered. Made by `layout`, for the script and the
    fork server's system calls alike."""

    cover: list[Path]
    binds: list[tuple[str, str, str]]
    keep: list[tuple[str, str]]


def layout(cwd: str | Path, hidden: Sequence[Path], kept: Sequence[Path | Pinned],
           mounts: Sequence[runinfo.Mount], user: TrialUser | None,
           reach: Sequence[Path]) -> Layout:
    """What `wrap` and `plan` mount (see `wrap`): the agent's own paths that are bound back
    made here, every path checked by `refuse_odd`."""
    python = [p.resolve() for p in needed_by_python()]
    cover = covers(hidden, [*reach, *python], user)
    # This agent's own paths (its work dir, its Python) are resolved and made here; `reach`
    # is bound exactly as given (resolved once by the caller, when it checked it), and only
    # where no user can swap a directory on its way; pinned storage exactly as given, and
    # only if what is bound is still what was checked (its device and inode, in the setup).
    pinned = {k.path: k.identity for k in kept if isinstance(k, Pinned)}
    own = [k.resolve() for k in (*kept, *python) if not isinstance(k, Pinned)]
    for k in own:
        if under(k, cover):
            k.mkdir(parents=True, exist_ok=True)  # a bind needs its source
    keep = {k: NO_IDENTITY for k in own if under(k, cover)}
    keep.update({k: i for k, i in pinned.items() if under(k, cover)})
    for k in reach:
        if k not in keep and under(k, cover) and k.is_dir() and unswappable(k):
            keep[k] = NO_IDENTITY
    placed = [m for m in mounts if m.source.is_dir()]
    binds = [(str(m.source), m.target, m.identity) if m.identity
             else (str(m.source.resolve()), m.target, NO_IDENTITY) for m in placed]
    pairs = [(str(k), i) for k, i in keep.items()]
    for path in (*map(str, cover), *(x for b in binds for x in b),
                 *(x for p in pairs for x in p), str(cwd)):
        refuse_odd(path)
    return Layout(cover, binds, pairs)


def wrap(support: Support, argv: Sequence[str], cwd: str | Path, hidden: Sequence[Path],
         kept: Sequence[Path | Pinned], mounts: Sequence[runinfo.Mount] = (),
         user: TrialUser | None = None, nproc: int | None = None,
         reach: Sequence[Path] = (), label: str = "") -> Launch:
    """`argv` run in new namespaces with `mounts` placed, `hidden` covered and `kept` (inside
    them) bound back, from `cwd` as seen through the new mounts (a cwd inherited from before
    them would still reach what they cover through `..`), as `user` without capabilities;
    the directories `user` could not pass on the way to `reach` (and this Python) covered too,
    with those bound back exactly as given: each absolute, resolved, existing and unswappable
    (never give it a path a user chose unchecked: it would read what it covers); a pinned
    `kept` or a mount with an identity bound as given, and the trial refused if what was
    bound is not what was checked;
    without namespaces, `argv` as `user` (a root agent) or unchanged. A mount whose target
    cannot be made (outside /run, without root) is skipped. `label` (`trial 3`) is what `ps`
    shows of the sandbox after its name."""
    tail = [*become(support, user, nproc), *argv]
    if not support.on:
        return Launch(tail, {})
    lay = layout(cwd, hidden, kept, mounts, user if support.root else None, reach)
    args = [str(len(lay.cover)), *map(str, lay.cover), str(len(lay.binds)),
            *(x for b in lay.binds for x in b), *(x for p in lay.keep for x in p), "--", *tail]
    env = {SCRIPT_VAR: SCRIPT, ARGS_VAR: shlex.join(args), STAGE_VAR: STAGE_TEMPLATE,
           CWD_VAR: str(cwd)}
    return Launch([*support.prefix, "--", shell(), "-c", RUN_SCRIPT, "dettui-sandbox",
                   *label.split()], env)


def plan(support: Support, cwd: str | Path, hidden: Sequence[Path],
         kept: Sequence[Path | Pinned], mounts: Sequence[runinfo.Mount] = (),
         user: TrialUser | None = None, nproc: int | None = None,
         reach: Sequence[Path] = ()) -> nsetup.Plan:
    """What `wrap` would make of a trial, for a process forked by the fork server to make
    itself (`nsetup.enter`) with system calls: the same namespaces, mounts, user, process
    limit and capabilities."""
    change = user is not None and support.root and user.uid != os.geteuid()
    out = nsetup.Plan(False, False, cwd=str(cwd), drop=change or support.on or support.root,
                      change_user=change)
    if change:
        assert user is not None
        out = replace(out, uid=user.uid, gid=user.gid, groups=tuple(user.groups),
                      nproc=nproc or None)
    if not support.on:
        return out
    lay = layout(cwd, hidden, kept, mounts, user if support.root else None, reach)
    return replace(out, namespaces=True, user_namespace="--user" in support.prefix,
                   hidden=tuple(map(str, lay.cover)), binds=tuple(lay.binds),
                   kept=tuple(lay.keep), private=(PRIVATE,))


def refuse_odd(path: str) -> None:
    """Refuse a path the sandbox's script could not hold as one item: its lists are split at
    line breaks, so a storage path with a newline (`/tmp/d\n/usr/sbin`) would shift the bind
    pairs and mount a user's directory over a system one, as root."""
    odd = next((c for c in path if ord(c) < 0x20 or ord(c) == 0x7f), None)
    if odd is not None:
        raise DettuiError(f"the sandbox refuses the path {path!r}: it holds the control "
                          f"character {odd!r} (storage and mount paths must not)")


def shell() -> str:
    """The sandbox's shell, by its path in the system's directories (not on a user's PATH)."""
    return shutil.which("sh", path=SYSTEM_PATH) or "/bin/sh"


def reach(support: Support, user: TrialUser, hidden: Sequence[Path]) -> str | None:
    """Whether `user` can run what every trial needs (this Python, importing dettui.core) in
    the sandbox a trial gets; if not, why, naming the path and the user."""
    argv = [sys.executable, "-c", "import dettui.core"]
    wrapped = wrap(support, argv, "/", hidden, (), (), user, label="check")
    try:
        res = subprocess.run(wrapped.argv, capture_output=True, text=True, timeout=120, cwd="/",
                             stdin=subprocess.DEVNULL,
                             env={**stage_environment({}), **wrapped.env})
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not check what trial user {user.describe()} can run: {exc}"
    if res.returncode == 0:
        return None
    lines = (res.stderr or "").strip().splitlines()
    why = lines[-1] if lines else f"exit status {res.returncode}"
    for path in (Path(os.path.realpath(sys.executable)), *needed_by_python()):
        where = None if support.on else unreachable(path, user)
        if where is not None:
            return (f"trial user {user.describe()} cannot reach {where} (on the way to {path}),"
                    f" so it cannot run trials: {why}")
        if path.is_file() and not readable(path, user):
            return f"trial user {user.describe()} cannot read {path}: {why}"
    return f"trial user {user.describe()} cannot run {sys.executable} with dettui: {why}"
