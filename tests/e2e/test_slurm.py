"""A resource pool backed by a real Slurm (slurmctld + slurmd + munged started by the fixture
from Debian's packages): `dettui serve --config master.yaml` with a Slurm pool, the samples run
as sbatch jobs, kills become scancel, an outside scancel ends the trial with Slurm's reason and
follows max_restarts, the queue shows Slurm's pending reason, and a restarted master adopts its
running job."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served
from tests.poll import until
from tests.slurm_cluster import SlurmCluster, missing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.xdist_group("slurm")]  # one throwaway Slurm at a time
WHY_NOT = missing()
if WHY_NOT:
    pytestmark.append(pytest.mark.skip(reason=WHY_NOT))

# A trial without torch (seconds, not tens of seconds): reports, watches for preemption.
TINY = """\
import time
from dettui import core

with core.init() as ctx:
    hp = ctx.info.trial.hparams
    for step in range(1, int(hp["steps"]) + 1):
        time.sleep(float(hp["sleep"]))
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        if ctx.preempt.should_preempt():
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "step").write_text(str(step))
            raise SystemExit(0)
    ctx.train.report_validation_metrics(steps_completed=step, metrics={"validation_loss": 0.1})
    print("tiny done")
"""
MASTER_YAML = """\
resource_pools:
  - pool_name: hpc
    provider: {type: slurm, partition: debug, slots_per_node: 2, poll_seconds: 0.3}
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    root = Path(tempfile.mkdtemp(prefix="dettui-slurm-"))
    cluster = SlurmCluster(root, cpus=2)
    started = time.monotonic()
    try:
        cluster.start()
        print(f"\nthe test Slurm started in {time.monotonic() - started:.2f} s")
        yield cluster
    finally:
        stopping = time.monotonic()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        print(f"the test Slurm stopped in {time.monotonic() - stopping:.2f} s")


@pytest.fixture
def hpc(slurm: SlurmCluster, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """`dettui serve --no-agent --config master.yaml`: its only pool is the Slurm one."""
    slurm.run("scancel", "--full", "--quiet", "--partition", slurm.partition, check=False)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    config = tmp_path / "master.yaml"
    config.write_text(MASTER_YAML)
    s = Served(tmp_path / "state", tmp_path / "config",
               extra=["--no-agent", "--config", str(config)])
    s.start(port=free_port())  # a fixed port: a restarted master is where its jobs call
    try:
        until(lambda: s.api("GET", "/api/v1/agents")["agents"], "the Slurm pool registered",
              timeout=90)
        yield s
    finally:
        s.stop()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def jobs(slurm: SlurmCluster, hpc: Served | None = None) -> list[dict[str, str]]:
    """Every job Slurm remembers (of `hpc`'s cluster only, if given), as scontrol's fields."""
    from dettui.master.slurmctl import fields

    out = slurm.run("scontrol", "show", "job", "-o").stdout
    found = [fields(line) for line in out.splitlines() if line.startswith("JobId=")]
    if hpc is None:
        return found
    mark = f"dettui {hpc.api('GET', '/api/v1/master')['clusterId']} "
    return [j for j in found if j.get("Comment", "").startswith(mark)]


def create(hpc: Served, tmp_path: Path, sample: str = "single.yaml", **changes: object) -> int:
    import yaml

    context = SAMPLE
    if sample != "tiny":
        config = yaml.safe_load((SAMPLE / sample).read_text())
    else:
        context = tmp_path / "tiny"
        context.mkdir(exist_ok=True)
        (context / "tiny.py").write_text(TINY)
        config = {"name": "tiny", "entrypoint": "python3 tiny.py", "max_restarts": 0,
                  "searcher": {"name": "single", "metric": "validation_loss",
                               "max_length": {"batches": 1}},
                  "hyperparameters": {"steps": 1000, "sleep": 0.1}}
    for key, value in changes.items():
        node = config
        *path, last = key.split("__")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    out = hpc.cli("e", "create", str(path), str(context)).stdout
    return int(out.split("Created experiment")[1].split()[0])


def trial_of(hpc: Served, exp_id: int) -> dict:
    return hpc.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]


def running_job(slurm: SlurmCluster, hpc: Served) -> dict[str, str]:
    return until(lambda: next((j for j in jobs(slurm, hpc)
                               if j.get("JobState") == "RUNNING"), None),
                 "a running Slurm job", timeout=90)


def test_single_sample_runs_as_a_slurm_job(slurm: SlurmCluster, hpc: Served,
                                           tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, searcher__max_length={"batches": 50},
                    min_validation_period={"batches": 25},
                    min_checkpoint_period={"batches": 50})
    exp = hpc.wait_experiment(exp_id, timeout=180)
    assert exp["state"] == "STATE_COMPLETED", hpc.log_path.read_text()[-3000:]  # type: ignore
    ours = jobs(slurm, hpc)
    assert len(ours) == 1 and ours[0]["JobState"] == "COMPLETED", ours
    assert ours[0]["Partition"] == "debug" and ours[0]["NumNodes"] == "1"
    metrics = hpc.api("GET", f"/api/v1/trials/{trial_of(hpc, exp_id)['id']}/metrics"
                      "?group=validation")["metrics"]
    assert metrics and metrics[-1]["metrics"]["avgMetrics"]["validation_loss"] >= 0
    logs = hpc.cli("t", "logs", str(trial_of(hpc, exp_id)["id"])).stdout
    assert "done after 50 steps" in logs
    assert f"Slurm job {ours[0]['JobId']} ended COMPLETED" in logs
    print(f"single sample on Slurm: {time.monotonic() - started:.1f} s")


def test_ddp_sample_reports_from_both_ranks(slurm: SlurmCluster, hpc: Served,
                                            tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, "ddp.yaml")
    exp = hpc.wait_experiment(exp_id, timeout=180)
    assert exp["state"] == "STATE_COMPLETED", hpc.log_path.read_text()[-3000:]  # type: ignore
    trial_id = trial_of(hpc, exp_id)["id"]
    for rank in (0, 1):
        assert hpc.cli("t", "logs", str(trial_id), "--rank", str(rank)).stdout.strip()
    job = jobs(slurm, hpc)[0]
    assert job["NumCPUs"] == "2", job
    print(f"ddp sample on Slurm: {time.monotonic() - started:.1f} s")


def test_kill_cancels_the_job(slurm: SlurmCluster, hpc: Served, tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, "tiny")
    job = running_job(slurm, hpc)
    until(lambda: trial_of(hpc, exp_id)["state"] == "STATE_RUNNING", "the trial running",
          timeout=90)
    hpc.cli("e", "kill", str(exp_id))
    assert hpc.wait_experiment(exp_id, timeout=60)["state"] == "STATE_CANCELED"
    ended = next(j for j in jobs(slurm) if j["JobId"] == job["JobId"])
    assert ended["JobState"] == "CANCELLED", ended
    print(f"kill on Slurm: {time.monotonic() - started:.1f} s")


def test_cancel_checkpoints_through_the_long_poll_and_ends_the_job(
        slurm: SlurmCluster, hpc: Served, tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, "tiny")
    job = running_job(slurm, hpc)
    until(lambda: trial_of(hpc, exp_id)["state"] == "STATE_RUNNING", "the trial running",
          timeout=90)
    hpc.cli("e", "cancel", str(exp_id))
    assert hpc.wait_experiment(exp_id, timeout=60)["state"] == "STATE_CANCELED"
    ended = next(j for j in jobs(slurm) if j["JobId"] == job["JobId"])
    assert ended["JobState"] == "COMPLETED", ended  # it checkpointed and exited: no scancel
    ckpts = hpc.api("GET", f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    assert ckpts, "cancel keeps the trial's work: it checkpointed before it stopped"
    print(f"cancel on Slurm: {time.monotonic() - started:.1f} s")


def test_outside_scancel_restarts_then_errors(slurm: SlurmCluster, hpc: Served,
                                              tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, "tiny", max_restarts=1)
    first = running_job(slurm, hpc)
    slurm.run("scancel", first["JobId"])
    second = until(lambda: next((j for j in jobs(slurm, hpc) if j["JobId"] != first["JobId"]
                                 and j.get("JobState") == "RUNNING"), None),
                   "the restart's job", timeout=90)
    assert trial_of(hpc, exp_id)["restarts"] == 1
    slurm.run("scancel", second["JobId"])
    exp = hpc.wait_experiment(exp_id, timeout=60)
    assert exp["state"] == "STATE_ERROR"
    logs = hpc.cli("t", "logs", str(trial_of(hpc, exp_id)["id"])).stdout
    assert f"Slurm job {first['JobId']} ended CANCELLED" in logs
    described = json.loads(hpc.cli("e", "describe", str(exp_id), "--json").stdout)
    assert described["trials"][0]["restarts"] == 2
    print(f"outside scancel on Slurm: {time.monotonic() - started:.1f} s")


def test_queue_shows_slurms_pending_reason(slurm: SlurmCluster, hpc: Served,
                                           tmp_path: Path) -> None:
    started = time.monotonic()
    blocker = slurm.run("sbatch", "--parsable", "-p", "debug", "-c", "2", "-o", "/dev/null",
                        "--wrap", "sleep 300").stdout.strip()
    until(lambda: any(j["JobId"] == blocker and j["JobState"] == "RUNNING"
                      for j in jobs(slurm)), "the blocking job running", timeout=90)
    exp_id = create(hpc, tmp_path)
    queue = "/api/v1/job-queues-v2"
    row = until(lambda: next((j["full"] for j in hpc.api("GET", queue)["jobs"]
                              if (j["full"].get("unschedulableReason") or "") in
                              ("Slurm: Resources", "Slurm: Priority")), None),
                "Slurm's reason in the queue", timeout=90)
    assert row["entityId"] == str(exp_id) and row["summary"]["state"] == "STATE_QUEUED"
    listed = hpc.cli("job", "list").stdout
    assert "Slurm: " in listed
    slurm.run("scancel", blocker)
    assert hpc.wait_experiment(exp_id, timeout=180)["state"] == "STATE_COMPLETED"
    print(f"pending reason on Slurm: {time.monotonic() - started:.1f} s")


def test_restarted_master_adopts_its_running_job(slurm: SlurmCluster, hpc: Served,
                                                 tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, "tiny", hyperparameters__steps=40,
                    hyperparameters__sleep=0.2)
    job = running_job(slurm, hpc)
    until(lambda: trial_of(hpc, exp_id)["state"] == "STATE_RUNNING", "the trial running",
          timeout=90)
    hpc.kill9()
    hpc.start(port=int(hpc.url.rsplit(":", 1)[1]))
    exp = hpc.wait_experiment(exp_id, timeout=180)
    assert exp["state"] == "STATE_COMPLETED", hpc.log_path.read_text()[-3000:]  # type: ignore
    ours = jobs(slurm, hpc)
    assert [j["JobId"] for j in ours] == [job["JobId"]], ours  # adopted, not submitted again
    assert trial_of(hpc, exp_id)["restarts"] == 0
    assert "tiny done" in hpc.cli("t", "logs", str(trial_of(hpc, exp_id)["id"])).stdout
    print(f"master restart on Slurm: {time.monotonic() - started:.1f} s")


def test_pause_is_the_preemption_long_poll_and_activate_submits_again(
        slurm: SlurmCluster, hpc: Served, tmp_path: Path) -> None:
    started = time.monotonic()
    exp_id = create(hpc, tmp_path, "tiny")
    first = running_job(slurm, hpc)
    hpc.cli("e", "pause", str(exp_id))
    until(lambda: trial_of(hpc, exp_id)["state"] == "STATE_PAUSED", "the trial paused", timeout=90)
    ended = next(j for j in jobs(slurm, hpc) if j["JobId"] == first["JobId"])
    assert ended["JobState"] == "COMPLETED", ended  # it checkpointed and exited: no scancel
    hpc.cli("e", "activate", str(exp_id))
    second = until(lambda: next((j for j in jobs(slurm, hpc) if j["JobId"] != first["JobId"]
                                 and j["JobState"] == "RUNNING"), None), "a new job", timeout=90)
    hpc.cli("e", "kill", str(exp_id))
    assert hpc.wait_experiment(exp_id, timeout=60)["state"] == "STATE_CANCELED"
    assert trial_of(hpc, exp_id)["restarts"] == 0
    assert second["JobId"] != first["JobId"]
    print(f"pause/activate on Slurm: {time.monotonic() - started:.1f} s")
