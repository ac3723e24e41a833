"""A real, throwaway single-node Slurm for tests: munged with its own key and socket, slurmctld
and slurmd with a slurm.conf, state, spool, logs and pid files under one temp dir. Nothing is
left running: `stop` cancels every job, then ends each daemon by its pid file."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = "slurmctld slurmd munge slurm-client"
TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "scancel", "srun")


def missing() -> str | None:
    """Why a Slurm cannot be started here, or None."""
    absent = [t for t in TOOLS if shutil.which(t) is None
              and not Path(f"/usr/sbin/{t}").exists()]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} missing): install Debian's "
                f"packages `{PACKAGES}` (the Makefile does it when run as root)")
    if os.geteuid() != 0:
        return "the test Slurm runs its daemons as root (SlurmUser=root); run the tests as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    root: Path
    cpus: int = 2
    partition: str = "debug"
    daemons: dict[str, Path] = field(default_factory=dict)  # name -> pid file

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """What a process needs to use this Slurm: its config file."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for d in ("munge", "state", "spool", "log", "run"):
            (self.root / d).mkdir(mode=0o700, exist_ok=True)
        self._munge()
        self._write_conf()
        env = {**os.environ, **self.env()}
        subprocess.run([_binary("slurmctld"), "-f", str(self.conf), "-i"], env=env, check=True,
                       capture_output=True, timeout=30)
        self.daemons["slurmctld"] = self.root / "run" / "slurmctld.pid"
        subprocess.run([_binary("slurmd"), "-f", str(self.conf), "-N", "localhost"], env=env,
                       check=True, capture_output=True, timeout=30)
        self.daemons["slurmd"] = self.root / "run" / "slurmd.pid"
        self._until_idle(env)

    def _munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        pid = self.root / "munge" / "munged.pid"
        subprocess.run([_binary("munged"), "--force", f"--socket={self.socket}",
                        f"--key-file={key}", f"--pid-file={pid}",
                        f"--log-file={self.root / 'log' / 'munged.log'}",
                        f"--seed-file={self.root / 'munge' / 'munged.seed'}"],
                       check=True, capture_output=True, timeout=30)
        self.daemons["munged"] = pid

    def _write_conf(self) -> None:
        r = self.root
        self.conf.write_text("\n".join([
            "ClusterName=dettuitest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"AuthInfo=socket={self.socket}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SchedulerParameters=batch_sched_delay=0",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "ReturnToService=2",
            "KillWait=3",
            "MinJobAge=600",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 "
            "State=UNKNOWN",
            f"PartitionName={self.partition} Nodes=localhost Default=YES MaxTime=INFINITE "
            "State=UP",
            "",
        ]))

    def _until_idle(self, env: dict[str, str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            res = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                 text=True, timeout=10)
            out = res.stdout.strip() + res.stderr.strip()
            if res.returncode == 0 and out in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the test Slurm did not come up: {out}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**os.environ, **self.env()}, capture_output=True,
                              text=True, timeout=30, check=check)

    def stop(self) -> None:
        if "slurmctld" in self.daemons:
            subprocess.run(["scancel", "--full", "--quiet", "--partition", self.partition],
                           env={**os.environ, **self.env()}, capture_output=True, timeout=30,
                           check=False)
        pids = [p for name in ("slurmd", "slurmctld", "munged")
                if (p := _pid(self.daemons.pop(name, None))) is not None]
        for pid in pids:  # all at once: each takes about 2 s to wind down
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            time.sleep(0.05)
        for pid in pids:  # lingering: SIGKILL
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _pid(pidfile: Path | None) -> int | None:
    try:
        return int(pidfile.read_text().split()[0]) if pidfile else None
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
