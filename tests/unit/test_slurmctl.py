"""The Slurm provider's pure parts: scontrol parsing, job outcomes, the sbatch job, a node's
share of a start message, and the master config's Slurm pools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dettui.agent.slurmpart import for_node
from dettui.errors import ConfigError
from dettui.launch.spec import Topology
from dettui.master import slurmctl
from dettui.master.settings import load_master_config, slurm_pools
from dettui.protocol import StartWork

LINE = ("JobId={id} JobName=dettui-x UserId=root(0) JobState={state} Reason={reason} "
        "Dependency=(null) ExitCode={code} NodeList=localhost "
        "Comment={comment} StdOut=/tmp/a b.out")


def line(id: str = "7", state: str = "RUNNING", reason: str = "None", code: str = "0:0",
         comment: str = "dettui C1 t-1.1") -> str:
    return LINE.format(id=id, state=state, reason=reason, code=code, comment=comment)


def test_jobs_are_read_from_scontrol_and_filtered_by_cluster() -> None:
    text = "\n".join([line("7"), line("8", comment="dettui OTHER t-2.1"),
                      line("9", comment="(null)"), "No jobs in the system"])
    jobs = slurmctl.parse_jobs(text, "C1")
    assert [(j.job_id, j.allocation_id, j.state) for j in jobs] == [
        ("7", "t-1.1", slurmctl.JobState.RUNNING)]
    assert slurmctl.fields(line())["StdOut"] == "/tmp/a b.out"  # values with spaces


@pytest.mark.parametrize(("state", "code", "outcome"), [
    ("COMPLETED", "0:0", (0, "")),
    ("FAILED", "3:0", (3, "")),
    ("FAILED", "0:9", (None, "slurm: the job failed (signal 9)")),
    ("CANCELLED", "0:15", (None, "slurm: the job was cancelled (scancel)")),
    ("TIMEOUT", "0:1", (None, "slurm: the job reached its time limit")),
    ("NODE_FAIL", "0:0", (None, "slurm: a node of the job failed")),
    ("CANCELLED+", "0:15", (None, "slurm: the job ended OTHER")),
])
def test_an_ended_job_is_an_allocation_exit(state: str, code: str,
                                            outcome: tuple[int | None, str]) -> None:
    job = slurmctl.parse_jobs(line(state=state, code=code), "C1")[0]
    assert job.outcome() == outcome


def test_states_and_pending_reasons() -> None:
    pending = slurmctl.parse_jobs(line(state="PENDING", reason="Resources"), "C1")[0]
    assert pending.pending_reason() == "Slurm: Resources"
    assert not pending.state.is_terminal() and not pending.state.is_running()
    running = slurmctl.parse_jobs(line(), "C1")[0]
    assert running.pending_reason() is None and running.state.is_running()
    assert slurmctl.JobState.parse("TIMEOUT").is_terminal()
    assert slurmctl.JobState.parse("") is slurmctl.JobState.OTHER


def test_a_submission_is_sized_from_the_slots() -> None:
    sub = slurmctl.Submission("debug", "t-1.2", "C1", 5, 2, "/venv/bin/py thon", "/w/%j.out",
                              ("--time=10",))
    assert (sub.nodes, sub.cpus_per_node) == (3, 2)
    argv = sub.argv()
    assert "--nodes=3" in argv and "--cpus-per-task=2" in argv and argv[-1] == "--time=10"
    assert "--comment=dettui C1 t-1.2" in argv and "--partition=debug" in argv
    assert "'/venv/bin/py thon' -P -m dettui.agent.slurmpart" in sub.script()
    assert "--kill-on-bad-exit=1" in sub.script()
    one = slurmctl.Submission("debug", "a", "C1", 1, 2, "py", "o")
    assert (one.nodes, one.cpus_per_node) == (1, 1)
    assert slurmctl.parse_submitted("42;cluster\n") == "42"
    assert slurmctl.partition_nodes("PartitionName=debug TotalNodes=3 TotalCPUs=6") == 3


def start(slots: list[int]) -> StartWork:
    return StartWork(allocation_id="a", task_id="t", trial_id=1, experiment_id=1, run_id=1,
                     slots=slots, env={"DET_SLOT_IDS": json.dumps(slots),
                                       "OMP_NUM_THREADS": str(len(slots)),
                                       "DET_AGENT_ID": "slurm-hpc"})


def test_each_node_takes_its_share_and_the_rendezvous() -> None:
    work = for_node(start([0, 1, 2, 3]), 1, ["10.0.0.1", "10.0.0.2"], 2, 20042)
    assert work.slots == [2, 3] and work.node_rank == 1
    assert json.loads(work.env["DET_SLOT_IDS"]) == [2, 3]
    assert work.env["OMP_NUM_THREADS"] == "2"
    topo = Topology.from_env(work.env)
    assert topo == Topology(("10.0.0.1", "10.0.0.2"), 1, (2, 2), 20042)
    single = for_node(start([0, 1]), 0, ["localhost"], 2, 20042)
    assert single.slots == [0, 1] and "DETTUI_RENDEZVOUS" not in single.env


def test_master_config_declares_slurm_pools(tmp_path: Path) -> None:
    path = tmp_path / "master.yaml"
    path.write_text("resource_pools:\n  - pool_name: hpc\n    provider: {type: slurm, "
                    "partition: debug, slots_per_node: 2}\n  - pool_name: default\n")
    pools = slurm_pools(load_master_config(path))
    assert list(pools) == ["hpc"]
    assert (pools["hpc"].partition, pools["hpc"].slots_per_node) == ("debug", 2)
    path.write_text("resource_pools:\n  - pool_name: hpc\n    provider: {type: slurm, "
                    "partition: 'a b', slots_per_node: 0}\n")
    with pytest.raises(ConfigError) as err:
        load_master_config(path)
    text = str(err.value.problems if hasattr(err.value, "problems") else err.value)
    assert "partition" in text and "slots_per_node" in text
