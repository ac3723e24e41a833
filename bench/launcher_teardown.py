"""When one worker fails: how long until the surviving worker is gone, how long until the
launcher exits, and with which code — dettui's torch_distributed launcher against plain
torchrun, in one run, 2 workers on this machine.

    .venv/bin/python bench/launcher_teardown.py [--runs 5]

Rank 1 records time.time() and exits 3 about a second after starting; rank 0 sleeps. The bench
polls every process of the surviving worker (rank 0's script, and under dettui the
`dettui.launch.worker` wrapper above it) every millisecond to see when the last one is gone,
and times the launcher's exit from the same clock.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

WORKER = """
import os, sys, time
from pathlib import Path
out, rank = Path(sys.argv[1]), os.environ["RANK"]
tmp = out / f"rank{rank}_pid.tmp"
tmp.write_text(str(os.getpid()))
tmp.replace(out / f"rank{rank}_pid")
if rank == "1":
    time.sleep(1.0)
    (out / "failed_at").write_text(repr(time.time()))
    sys.exit(3)
time.sleep(600)
"""
POLL = 0.001


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_cmd(kind: str, script: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    """The same env the launcher tests use for 2 processes on one node, outside a cluster."""
    env = dict(os.environ)
    if kind == "dettui":
        env.update({"DET_SLOT_IDS": "[0,1]", "DETTUI_C10D_PORT": str(free_port())})
        return ([sys.executable, "-m", "dettui.launch.torch_distributed", sys.executable,
                 str(script), str(out)], env)
    return ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
             "--master_port", str(free_port()), str(script), str(out)], env)


def wait_for(path: Path, proc: subprocess.Popen[bytes]) -> str:
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"launcher exited with {proc.returncode} before {path.name}")
        time.sleep(0.002)
    return path.read_text()


def survivor(rank0_pid: int) -> list[psutil.Process]:
    """Rank 0's script and its ancestors below torchrun's agent (dettui's worker wrapper)."""
    procs = [psutil.Process(rank0_pid)]
    parent = procs[0].parent()
    while parent is not None and "torch.distributed.run" not in " ".join(parent.cmdline()):
        procs.append(parent)
        parent = parent.parent()
    return procs


def gone(p: psutil.Process) -> bool:
    try:
        return bool(p.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def one_run(kind: str, script: Path) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        argv, env = launch_cmd(kind, script, out)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        procs = survivor(int(wait_for(out / "rank0_pid", proc)))
        wait_for(out / "rank1_pid", proc)
        while not all(gone(p) for p in procs):
            time.sleep(POLL)
        gone_at = time.time()
        code = proc.wait(60)
        exited_at = time.time()
        failed_at = float((out / "failed_at").read_text())
        return gone_at - failed_at, exited_at - failed_at, code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    results: dict[str, list[tuple[float, float, int]]] = {"dettui": [], "torchrun": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "worker.py"
        script.write_text(textwrap.dedent(WORKER))
        for _ in range(args.runs):  # interleaved: both see the same machine
            for kind in results:
                results[kind].append(one_run(kind, script))
    table = Table(title=f"one of 2 workers exits 3; {args.runs} runs each (seconds after "
                        "the failure)")
    for col in ("launcher", "survivor gone (median / max)", "launcher exit (median / max)",
                "exit codes"):
        table.add_column(col, justify="right")
    med = {}
    for kind, runs in results.items():
        gone_s, exit_s = [r[0] for r in runs], [r[1] for r in runs]
        med[kind] = (statistics.median(gone_s), statistics.median(exit_s))
        table.add_row(kind, f"{med[kind][0]:.3f} / {max(gone_s):.3f}",
                      f"{med[kind][1]:.3f} / {max(exit_s):.3f}",
                      ", ".join(sorted({str(r[2]) for r in runs})))
    table.add_row("ratio (torchrun / dettui)",
                  f"{med['torchrun'][0] / med['dettui'][0]:.1f}x",
                  f"{med['torchrun'][1] / med['dettui'][1]:.1f}x", "")
    Console(width=120).print(table)
    ours = results["dettui"]
    ok = (max(r[0] for r in ours) <= 0.2 and max(r[1] for r in ours) <= 0.3
          and {r[2] for r in ours} == {3})
    print("targets (every run: survivor gone <= 0.2 s, launcher exit <= 0.3 s, exit code 3 "
          f"kept): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
