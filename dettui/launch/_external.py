"""Shared pieces of the launchers that wrap another tool (DeepSpeed, Horovod)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

from dettui.launch import spec


def require(tool: str, package: str, what: str) -> str:
    """The tool's path, or exit 1 with how to install it."""
    path = shutil.which(tool)
    if path is None:
        print(f"dettui.launch: `{tool}` was not found on PATH. This entrypoint needs {what}: "
              f"install it into the trial's Python (`{sys.executable} -m pip install "
              f"{package}`; the experiment's PATH or entrypoint may name another Python), or "
              "use python3 -m dettui.launch.torch_distributed.", file=sys.stderr)
        raise SystemExit(1)
    return path


def hostfile(topo: spec.Topology, path: str) -> str:
    """One `address slots=N` line per node, chief first (DeepSpeed/OpenMPI hostfile)."""
    with open(path, "w") as f:
        for address, slots in zip(topo.addresses, topo.slots_per_node, strict=True):
            f.write(f"{address} slots={slots}\n")
    return path


def run(argv: Sequence[str], env: dict[str, str]) -> int:
    proc = subprocess.Popen(list(argv), env={**os.environ, **env})
    code = proc.wait()
    return code if code >= 0 else 128 - code
