"""Slurm's command line as data: what `sbatch`, `scontrol` and `scancel` are run with, and what
their output means. Pure (no processes here): the Slurm provider (cluster/slurm.py) runs them.

Slurm 22.05's `--json` output cannot be filtered, so jobs are read with `scontrol show job -o`
(one line of Key=Value per job, every job Slurm still remembers, ended ones for MinJobAge) and
filtered here by the comment each dettui job carries: `dettui <cluster id> <allocation id>`.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from enum import StrEnum

COMMENT_PREFIX = "dettui"
_KEY = re.compile(r"(?:^|\s)([A-Za-z/:_]+)=")


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    CONFIGURING = "CONFIGURING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    REQUEUED = "REQUEUED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, text: str) -> JobState:
        try:
            return cls(text.split()[0] if text else "OTHER")
        except ValueError:
            return cls.OTHER

    def is_terminal(self) -> bool:
        return self in _TERMINAL

    def is_running(self) -> bool:
        return self in (JobState.RUNNING, JobState.CONFIGURING)


_TERMINAL = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
             JobState.NODE_FAIL, JobState.PREEMPTED, JobState.OUT_OF_MEMORY,
             JobState.BOOT_FAIL, JobState.DEADLINE}

# Why Slurm ended a job, as the trial's exit reason (a plain failure keeps its exit code).
_REASONS = {
    JobState.CANCELLED: "slurm: the job was cancelled (scancel)",
    JobState.TIMEOUT: "slurm: the job reached its time limit",
    JobState.NODE_FAIL: "slurm: a node of the job failed",
    JobState.PREEMPTED: "slurm: the job was preempted by Slurm",
    JobState.OUT_OF_MEMORY: "slurm: the job ran out of memory",
    JobState.BOOT_FAIL: "slurm: a node of the job failed to boot",
    JobState.DEADLINE: "slurm: the job reached its deadline",
}


@dataclass(frozen=True)
class Job:
    job_id: str
    cluster_id: str
    allocation_id: str
    state: JobState
    reason: str  # Slurm's pending reason (Resources, Priority, ...), "None" when it runs
    exit_code: int | None
    signal: int | None
    nodes: str = ""

    def outcome(self) -> tuple[int | None, str]:
        """(exit code, reason) of an ended job, as an allocation's exit."""
        if self.state is JobState.COMPLETED:
            return self.exit_code or 0, ""
        if self.state is JobState.FAILED:
            code = self.exit_code if self.exit_code else None
            return code, "" if code else f"slurm: the job failed (signal {self.signal})"
        return None, _REASONS.get(self.state, f"slurm: the job ended {self.state.value}")

    def pending_reason(self) -> str | None:
        """Slurm's reason a pending job waits, for the job queue."""
        if self.state is not JobState.PENDING:
            return None
        return f"Slurm: {self.reason}" if self.reason and self.reason != "None" \
            else "Slurm: waiting to start"


def fields(line: str) -> dict[str, str]:
    """One `scontrol -o` line's Key=Value pairs (values may hold spaces: a value runs to the
    next key)."""
    keys = list(_KEY.finditer(line))
    out = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def parse_jobs(text: str, cluster_id: str) -> list[Job]:
    """The jobs of this cluster in `scontrol show job -o` output."""
    out = []
    for line in text.splitlines():
        f = fields(line)
        comment = f.get("Comment", "").split()
        if len(comment) != 3 or comment[0] != COMMENT_PREFIX or comment[1] != cluster_id:
            continue
        code, _, sig = f.get("ExitCode", "").partition(":")
        out.append(Job(f.get("JobId", ""), comment[1], comment[2],
                       JobState.parse(f.get("JobState", "")), f.get("Reason", ""),
                       int(code) if code.isdigit() else None,
                       int(sig) if sig.isdigit() else None, f.get("NodeList", "")))
    return out


def partition_nodes(text: str) -> int:
    """TotalNodes of `scontrol show partition NAME -o`."""
    value = fields(text.strip()).get("TotalNodes", "0")
    return int(value) if value.isdigit() else 0


@dataclass(frozen=True)
class Submission:
    """One allocation as an sbatch job."""

    partition: str
    allocation_id: str
    cluster_id: str
    slots: int
    slots_per_node: int
    python: str
    output: str
    extra: tuple[str, ...] = ()

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.slots / self.slots_per_node))

    @property
    def cpus_per_node(self) -> int:
        return max(1, min(self.slots, self.slots_per_node))

    def argv(self) -> list[str]:
        return ["sbatch", "--parsable", f"--partition={self.partition}",
                f"--job-name=dettui-{self.allocation_id}",
                f"--comment={COMMENT_PREFIX} {self.cluster_id} {self.allocation_id}",
                f"--nodes={self.nodes}", "--ntasks-per-node=1",
                f"--cpus-per-task={self.cpus_per_node}", f"--output={self.output}",
                "--export=ALL", "--no-requeue", *self.extra]

    def script(self) -> str:
        """The batch script: one node part per node, a failure on one ends all (srun)."""
        return ("#!/bin/sh\n"
                "# dettui allocation " + self.allocation_id + "\n"
                "exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 "
                f"--cpus-per-task={self.cpus_per_node} "
                f"{shlex.quote(self.python)} -P -m dettui.agent.slurmpart\n")


def parse_submitted(stdout: str) -> str:
    """The job id of `sbatch --parsable` (`id` or `id;cluster`)."""
    return stdout.strip().split(";")[0]
