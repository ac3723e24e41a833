"""Each allocation's processes run in Linux namespaces of their own, set up with util-linux's
`unshare` (no containers, no new dependency):

- a PID namespace: the entrypoint is its init, so when the allocation ends (or the agent dies:
  the agent's parent-death signal ends `unshare`, whose --kill-child ends the init) every process
  in it ends, however it double-forked or re-parented itself;
- a mount namespace in which the paths the trial must not read (the master's state dir with its
  database, the agent's work root with other allocations, the dettui config dir with tokens) are
  covered by empty read-only tmpfs, with only what the trial needs bound back: its own work dir
  and its checkpoint storage;
- in that namespace, Determined's container paths (`runinfo.mounts`): the allocation's run dir
  with its info files at /run/determined, the work dir at /run/determined/workdir, shared_fs
  storage at /determined_shared_fs. Where /run cannot be written (a user namespace without
  root), a tmpfs goes over /run with its entries bound back, so /run/determined can be made.

Where namespaces are not available (not root, and no user namespaces), `probe` says why once and
allocations run as plain process groups with a parent-death signal, swept at agent start.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dettui.agent import runinfo

OFF_SWITCH = "DETTUI_NO_SANDBOX"  # set (to anything): run without namespaces, as a fallback
STAGE = "/tmp/.dettui-sandbox"  # where kept paths wait while their parents are covered

# Run as the init of the new namespaces: place the mounts, stage what is kept, cover what is
# hidden, put what is kept back, then become the entrypoint. Arguments:
# N_HIDDEN hidden... N_MOUNTS (source target)... kept... -- argv...
SCRIPT = r"""
set -e
n=$1; shift
hidden=""; i=0
while [ "$i" -lt "$n" ]; do hidden="$hidden
$1"; shift; i=$((i + 1)); done
n=$1; shift
binds=""; i=0
while [ "$i" -lt "$n" ]; do binds="$binds
$1
$2"; shift 2; i=$((i + 1)); done
kept=""
while [ "$1" != "--" ]; do kept="$kept
$1"; shift; done
shift
mount --make-rprivate /
mkdir -p "$STAGE"
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
    if [ -d "$e" ]; then mkdir "$b"; elif [ -e "$e" ]; then : > "$b"; else continue; fi
    mount --rbind "$e" "$b" 2>/dev/null || true
  done
}
src=""
for x in $binds; do
  if [ -z "$src" ]; then src=$x; continue; fi
  if ! mkdir -p "$x" 2>/dev/null; then
    case "$x" in /run/*) open_run; mkdir -p "$x" ;; *) src=""; continue ;; esac
  fi
  mount --rbind "$src" "$x"
  src=""
done
i=0
for k in $kept; do i=$((i + 1)); mkdir -p "$STAGE/$i"; mount --rbind "$k" "$STAGE/$i"; done
for h in $hidden; do mount -t tmpfs -o mode=0755,size=64k dettui-hidden "$h"; done
i=0
for k in $kept; do i=$((i + 1)); mkdir -p "$k"; mount --rbind "$STAGE/$i" "$k"; done
for h in $hidden; do mount -o remount,ro,bind "$h" 2>/dev/null || true; done
umount -l "$STAGE"
cd "$CWD"
unset IFS STAGE CWD
exec "$@"
"""


@dataclass(frozen=True)
class Support:
    """What this machine lets the agent do: `prefix` starts a command in new namespaces (empty
    when it cannot), `note` says why not."""

    prefix: tuple[str, ...]
    note: str | None = None

    @property
    def on(self) -> bool:
        return bool(self.prefix)


@functools.cache
def probe() -> Support:
    """Try `unshare` once: as root, or in a user namespace of its own when not root."""
    if os.environ.get(OFF_SWITCH):
        return Support((), f"sandbox off ({OFF_SWITCH} is set): allocations run as process "
                           "groups, without namespaces")
    unshare = shutil.which("unshare")
    if unshare is None:
        return Support((), "util-linux's unshare is not installed: allocations run as "
                           "process groups, without namespaces")
    base = (unshare, "--mount", "--pid", "--fork", "--kill-child", "--mount-proc")
    tries = [base] if os.geteuid() == 0 else []
    tries.append((unshare, "--user", "--map-current-user", *base[1:]))
    last = ""
    for prefix in tries:
        try:
            res = subprocess.run([*prefix, "--", "sh", "-c", "mount -t tmpfs t /mnt 2>/dev/null "
                                  "|| mount -t tmpfs t /tmp"], capture_output=True, timeout=10,
                                 stdin=subprocess.DEVNULL, text=True)
        except (OSError, subprocess.SubprocessError) as exc:
            last = str(exc)
            continue
        if res.returncode == 0:
            return Support(prefix)
        lines = (res.stderr or "").strip().splitlines()
        last = lines[-1] if lines else f"exit status {res.returncode}"
    return Support((), f"Linux namespaces are not available here ({last or 'unshare failed'}):"
                       " allocations run as process groups, without namespaces")


def outermost(paths: Sequence[Path]) -> list[Path]:
    """The paths that are not inside another of them (resolved, de-duplicated)."""
    resolved = sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in resolved:
        if not any(p.is_relative_to(o) for o in out):
            out.append(p)
    return out


def wrap(support: Support, argv: Sequence[str], cwd: str | Path, hidden: Sequence[Path],
         kept: Sequence[Path], mounts: Sequence[runinfo.Mount] = ()) -> list[str]:
    """`argv` run in new namespaces with `mounts` placed, `hidden` covered and `kept` (inside
    them) bound back, from `cwd` as seen through the new mounts (a cwd inherited from before
    them would still reach what they cover through `..`); `argv` unchanged when namespaces are
    unavailable. A mount whose target cannot be made (outside /run, without root) is skipped."""
    if not support.on:
        return list(argv)
    cover = [h for h in outermost(hidden) if h.is_dir()]
    keep = [k.resolve() for k in kept if any(k.resolve().is_relative_to(h) for h in cover)]
    for k in keep:
        k.mkdir(parents=True, exist_ok=True)  # a bind needs its source
    placed = [m for m in mounts if m.source.is_dir()]
    pairs = [str(x) for m in placed for x in (m.source.resolve(), m.target)]
    return [*support.prefix, "--", "env", f"STAGE={STAGE}", f"CWD={cwd}", "sh", "-c", SCRIPT,
            "sandbox", str(len(cover)), *map(str, cover), str(len(placed)), *pairs,
            *map(str, keep), "--", *argv]
