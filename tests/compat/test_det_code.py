"""Code written for Determined runs unchanged on dettui: a Core API script with the real
determined==0.38.1 package in the trial's Python (with and without namespaces) and without it
(dettui's modules under Determined's names), read back with the real `det` CLI; its run
metadata and the checkpoint it says it uses reach the master either way."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dettui.agent import sandbox
from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]
NAMESPACES = sandbox.probe().on

CORE_SCRIPT = """
import json, os, sys, time, types
import determined as det
from determined import core

print("determined is", det.__file__, flush=True)
info = det.get_cluster_info()
print("info files", sorted(os.listdir(os.environ["DET_RUN_DIR"] + "/info")), flush=True)
try:  # the real package's SDK inside the trial signs in with DET_USER_TOKEN
    from determined.experimental import client
    print("sdk sees trial", client.get_trial(info.trial.trial_id).id, flush=True)
except ImportError:
    pass
with core.init() as ctx:
    start = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = int((path / "step").read_text())
    print("resumed from", start, "run", info.trial._trial_run_id, flush=True)
    for op in ctx.searcher.operations():
        for step in range(start + 1, op.length + 1):
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
            if step % 2 == 0:
                ctx.train.report_validation_metrics(steps_completed=step,
                                                    metrics={"val_loss": 1 / step})
                with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                    (path / "step").write_text(str(step))
                print("checkpoint", step, uuid, flush=True)
            op.report_progress(step)
            while start == 0 and step == 2 and not ctx.preempt.should_preempt():
                time.sleep(0.1)  # the first run waits here to be paused
            if ctx.preempt.should_preempt():
                print("preempted at", step, flush=True)
                sys.exit(0)
        op.report_completed(1 / op.length)
    ctx.train.set_metadata({"script": "core", "run": info.trial._trial_run_id})
    print("run metadata", json.dumps(ctx.train.get_metadata(), sort_keys=True), flush=True)
    ctx.experimental.report_task_using_checkpoint(types.SimpleNamespace(uuid=uuid))
"""


@pytest.fixture(params=["real", "real-fallback", "dettui"])
def variant(request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Served]]:
    kind = request.param
    if kind != "real-fallback" and not NAMESPACES:
        pytest.skip(sandbox.probe().note or "no namespaces")
    if kind == "real-fallback":
        monkeypatch.setenv(sandbox.OFF_SWITCH, "1")
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "2"])
    s.start()
    try:
        yield kind, s
    finally:
        s.stop()


def test_a_core_api_script_reports_pauses_and_resumes(variant: tuple[str, Served],
                                                      tmp_path: Path) -> None:
    kind, served = variant
    python = f"{DET_VENV}/bin/python" if kind.startswith("real") else "python3"
    cfg, ctx = write_ctx(tmp_path, f"""
        name: core-{kind}
        entrypoint: {python} train.py
        searcher: {{name: single, metric: val_loss, max_length: 6}}
        """, {"train.py": CORE_SCRIPT})
    home = tmp_path / "home"
    home.mkdir()
    assert det(served, home, "user", "login", "determined", stdin="\n").returncode == 0
    created = det(served, home, "e", "create", str(cfg), str(ctx))
    assert created.returncode == 0, created.stdout + created.stderr
    until(lambda: served.api(
        "GET", "/api/v1/experiments/1/checkpoints")["checkpoints"], "the first checkpoint",
          timeout=120)
    assert det(served, home, "e", "pause", "1").returncode == 0
    until(lambda: served.api("GET", "/api/v1/experiments/1/trials")[
        "trials"][0]["state"] == "STATE_PAUSED", "the pause", timeout=120)
    assert det(served, home, "e", "activate", "1").returncode == 0
    exp = served.wait_experiment(1, timeout=180)
    until(lambda: "resumed from 2" in served.cli(
        "t", "logs", "1").stdout, "the second run's logs", timeout=30)
    logs = served.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs
    expected = (f"{DET_VENV}/lib" if kind.startswith("real")
                else "dettui/launch/_determined.py")
    assert f"determined is {expected}" in logs or expected in logs, logs
    assert "info files ['cluster.json', 'rendezvous.json', 'resources.json', 'trial.json']" \
        in logs, logs
    assert "preempted at 2" in logs and "resumed from 2 run 2" in logs, logs
    assert ("sdk sees trial 1" in logs) == kind.startswith("real"), logs
    trial = served.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["totalBatchesProcessed"] == 6 and trial["restarts"] == 0, trial
    last = [line.split()[-1] for line in logs.splitlines() if "checkpoint 6 " in line]
    assert last, logs
    described = det(served, home, "e", "describe", "1", "--metrics")
    assert described.returncode == 0, described.stdout + described.stderr
    assert "Validation Metric: val_loss" in described.stdout, described.stdout
    rows = [[c.strip() for c in r.split("|")] for r in described.stdout.splitlines()]
    row = next((r for r in rows if len(r) > 9 and r[1] == "6"), [])
    assert row[5] == "COMPLETED" and row[-1] == "0.166667", described.stdout
    assert last[0] in served.cli("e", "describe", "1").stdout
    # run metadata and the checkpoint the trial says it uses, through the package's own calls
    assert 'run metadata {"run": 2, "script": "core"}' in logs, logs
    assert served.api("GET", "/api/v1/runs/1/metadata")["metadata"] == {"script": "core",
                                                                       "run": 2}
    used = served.api("GET", f"/api/v1/checkpoints/{last[0]}/metrics?metricGroup=validation")
    assert [m["totalBatches"] for m in used["metrics"]] == [2, 4, 6], used
    ckpt = served.state_dir / "checkpoints" / last[0]
    assert (ckpt / "step").read_text() == "6" and (ckpt / "metadata.json").is_file()
    if kind == "real" and os.path.isdir("/determined_shared_fs"):
        assert not (Path("/determined_shared_fs") / last[0]).exists()  # the host's is empty


DIST_SCRIPT = """
import torch.distributed as dist
import determined as det
from determined import core

dist.init_process_group("gloo")
distributed = core.DistributedContext.from_torch_distributed()
print("determined is", det.__file__, "rank", distributed.rank, "of", distributed.size,
      flush=True)
with core.init(distributed=distributed) as ctx:
    ranks = ctx.distributed.allgather(distributed.rank)
    if distributed.rank == 0:
        ctx.train.report_training_metrics(steps_completed=1,
                                          metrics={"ranks_seen": float(len(set(ranks)))})
    md = {"steps_completed": 1, f"from_rank_{distributed.rank}": distributed.rank}
    with ctx.checkpoint.store_path(md, shard=True) as (path, uuid):
        (path / f"model-rank{distributed.rank}.bin").write_text(f"rank {distributed.rank}")
    print("sharded checkpoint", uuid, flush=True)
dist.destroy_process_group()
"""


def test_the_real_torch_distributed_launcher_with_two_slots(served: Served,
                                                            tmp_path: Path) -> None:
    """`python3 -m determined.launch.torch_distributed` of the real package (its pid_server,
    torchrun, wrap_rank): both ranks report through the real Core API and their shards merge."""
    cfg, ctx = write_ctx(tmp_path, f"""
        name: dist-real
        entrypoint: >-
          export PATH={DET_VENV}/bin:$PATH;
          python3 -m determined.launch.torch_distributed python3 train.py
        resources: {{slots_per_trial: 2}}
        searcher: {{name: single, metric: x}}
        max_restarts: 0
        """, {"train.py": DIST_SCRIPT})
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=180).stdout
    assert "ended: COMPLETED" in out, out
    for rank in (0, 1):
        assert f"[rank={rank}] || determined is {DET_VENV}/lib" in out, out
    uuid = out.split("sharded checkpoint ", 1)[1].split()[0]
    ckpt = served.api("GET", f"/api/v1/checkpoints/{uuid}")["checkpoint"]
    assert ckpt["metadata"] == {"steps_completed": 1, "from_rank_0": 0, "from_rank_1": 1}
    assert {"model-rank0.bin", "model-rank1.bin", "metadata.json"} <= set(ckpt["resources"])
    files = served.state_dir / "checkpoints" / uuid
    assert (files / "model-rank1.bin").read_text() == "rank 1"
    metrics = served.api("GET", "/api/v1/trials/1/metrics?group=training")["metrics"]
    assert metrics[-1]["metrics"]["avgMetrics"]["ranks_seen"] == 2
