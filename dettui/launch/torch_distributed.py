"""`python -m dettui.launch.torch_distributed [TORCH_OVERRIDES... --] (--trial T | SCRIPT...)`.

Runs torchrun (torch.distributed.run) with the allocation's topology, each worker wrapped so
its lines carry `[rank=N] `. The launcher contract: if any worker exits non-zero, the rest are
terminated (SIGTERM, then SIGKILL after a grace) and the launcher exits with *that worker's*
code (torchrun alone exits 1); it exits 0 only when every worker exits 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from dettui.launch import forked_workers, spec
from dettui.launch.worker import LAUNCH_DIR, LAUNCHER_PID

GRACE = 5.0
POLL = 0.05
SIGNAL_WAIT = 1.0


def build(argv: list[str], env: dict[str, str]) -> spec.Command:
    overrides, rest = spec.split_overrides(argv)
    script = spec.script_of(rest, python=sys.executable)
    topo = spec.Topology.from_env(env)
    cmd = spec.torchrun_command(overrides, script, topo, python=sys.executable)
    if topo.nnodes > 1:
        ifname = interface_to(topo.addresses[0])
        if ifname:
            cmd.env.setdefault("GLOO_SOCKET_IFNAME", ifname)
            cmd.env.setdefault("NCCL_SOCKET_IFNAME", ifname)
    return cmd


def interface_to(address: str) -> str | None:
    """The network interface this machine uses to reach `address` (the chief)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))  # picks the route; sends nothing
            local = s.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return name
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SIGNAL_CODES = {128 + signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGINT}


def _first_failure(launch_dir: Path, nproc: int) -> tuple[int, int] | None:
    """The worker that failed first: (rank, code). A worker ended by a signal (because torchrun
    was already tearing the group down) counts only when no worker failed on its own."""
    failures = []
    for rank_file in launch_dir.glob("rank-*.exit"):
        with contextlib.suppress(ValueError, OSError):
            code_text, _, when = rank_file.read_text().partition(" ")
            code = int(code_text)
            if code != 0:
                rank = int(rank_file.stem.split("-")[1])
                failures.append((code in SIGNAL_CODES, float(when or 0), rank, code))
    if not failures:
        return None
    _, _, rank, code = min(failures)
    return rank, code


def _end_tree(proc: subprocess.Popen[bytes]) -> None:
    """End the workers (SIGTERM, SIGKILL after GRACE), then torchrun itself at once: with its
    workers gone it has nothing left to shut down cleanly, and its own teardown would only
    delay our exit."""
    try:
        workers = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        workers = []
    for p in workers:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(workers, timeout=GRACE)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def supervise(cmd: spec.Command, nproc: int) -> int:
    # Under the allocation's run dir when there is one: the agent removes that even when
    # this launcher is SIGKILLed and its own clean-up never runs.
    run_dir = os.environ.get("DET_RUN_DIR")
    base = run_dir if run_dir and os.access(run_dir, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="dettui-launch-", dir=base) as tmp:
        launch_dir = Path(tmp)
        env = {**os.environ, **cmd.env, LAUNCH_DIR: str(launch_dir),
               LAUNCHER_PID: str(os.getpid())}
        proc = subprocess.Popen(list(cmd.argv), env=env)

        stopped = False  # the launcher itself was told to stop (the agent kills the trial)

        def forward(signum: int, _frame: object) -> None:
            nonlocal stopped
            stopped = True
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, forward)
        signalled_since: float | None = None
        while proc.poll() is None:
            failure = _first_failure(launch_dir, nproc)
            if failure is not None and failure[1] in SIGNAL_CODES and not stopped:
                # Torchrun may already be tearing down after another worker's failure: give
                # that worker a moment to record its own code. (Not when the signal came from
                # outside, through us: then there is no other cause to wait for, and waiting
                # would only keep this node of a failed trial alive for SIGNAL_WAIT.)
                signalled_since = signalled_since or time.monotonic()
                if time.monotonic() - signalled_since < SIGNAL_WAIT:
                    time.sleep(POLL)
                    continue
            if failure is not None:
                rank, code = failure
                if not stopped:
                    print(f"dettui launcher: rank {rank} exited with {code}; ending the other "
                          "workers", file=sys.stderr, flush=True)
                _end_tree(proc)
                return code
            time.sleep(POLL)
        deadline = time.monotonic() + SIGNAL_WAIT
        failure = _first_failure(launch_dir, nproc)
        while ((failure is None or failure[1] in SIGNAL_CODES) and not stopped
               and time.monotonic() < deadline):
            if proc.returncode == 0 and failure is None:
                break
            time.sleep(POLL)
            failure = _first_failure(launch_dir, nproc)
        if failure is not None:  # torchrun ended the others itself before we looked
            if not stopped:
                print(f"dettui launcher: rank {failure[0]} exited with {failure[1]}",
                      file=sys.stderr, flush=True)
            return failure[1]
        code = proc.returncode
        return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    dry_run = bool(args) and args[0] == "--dry-run"
    if dry_run:
        args = args[1:]
    env = dict(os.environ)
    if not dry_run and not any(k in env for k in (spec.RENDEZVOUS, "DETTUI_C10D_PORT",
                                                  "C10D_PORT")):
        env["DETTUI_C10D_PORT"] = str(free_port())  # one node: any free port will do
    try:
        cmd = build(args, env)
    except spec.LaunchArgsError as exc:
        print(f"torch_distributed: {exc}", file=sys.stderr)
        return exc.code
    if dry_run:
        print(cmd.render())
        return 0
    topo = spec.Topology.from_env(env)
    overrides, rest = spec.split_overrides(args)
    run = forked_workers.eligible(overrides, spec.script_of(rest, python=sys.executable), topo,
                                  env)
    if run is not None:
        return forked_workers.supervise(run, topo.nproc, topo.port, cmd.env)
    return supervise(cmd, topo.nproc)


if __name__ == "__main__":
    sys.exit(main())
