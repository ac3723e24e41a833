"""A DistributedContext a script builds itself (Determined's Core API tutorial, stage 4:
`core.DistributedContext(rank=..., size=..., chief_ip=...)`) communicates: allgather, gather,
broadcast and their `_local` twins across real processes, in any order of arrival; and one
built from horovod's or DeepSpeed's ranks does too. A stranger without the trial's key is
not let in."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dettui import core
from dettui.core._exchange import ExchangeError, Hub, Spoke
from tests.conftest import Served
from tests.core.test_sharded import free_port

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys, time
from dettui import core

rank, size, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if rank == 0:
    time.sleep(0.5)  # the workers reach their first collective before the chief listens
if how == "horovod":
    class hvd:
        rank = staticmethod(lambda: rank); size = staticmethod(lambda: size)
        local_rank = staticmethod(lambda: rank); local_size = staticmethod(lambda: size)
        cross_rank = staticmethod(lambda: 0); cross_size = staticmethod(lambda: 1)
    dist = core.DistributedContext.from_horovod(hvd)
elif how == "deepspeed":
    dist = core.DistributedContext.from_deepspeed()
else:
    dist = core.DistributedContext(rank=rank, size=size, local_rank=rank, local_size=size,
                                   cross_rank=0, cross_size=1, chief_ip="127.0.0.1")
out = {"allgather": [dist.allgather(rank * 10) for _ in range(3)][-1],
       "gather": dist.gather({"r": rank}),
       "broadcast": dist.broadcast("chief's" if rank == 0 else "mine"),
       "allgather_local": dist.allgather_local(f"l{rank}"),
       "gather_local": dist.gather_local(rank),
       "broadcast_local": dist.broadcast_local(list(range(1000)) if rank == 0 else None)[-1]}
dist.close()
print(json.dumps(out))
"""


def run_ranks(tmp_path: Path, size: int, how: str) -> list[dict]:
    (tmp_path / "ranks.py").write_text(textwrap.dedent(SCRIPT))
    port = free_port()
    procs = []
    for rank in range(size):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DET_SESSION_TOKEN": "secret",
               "INTER_TRAIN_PROCESS_COMM_PORT_1": str(port), "RANK": str(rank),
               "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank), "LOCAL_SIZE": str(size),
               "CROSS_RANK": "0", "CROSS_SIZE": "1"}
        procs.append(subprocess.Popen(
            [sys.executable, str(tmp_path / "ranks.py"), str(rank), str(size), how],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out) for out, _ in outs]


@pytest.mark.parametrize("how", ["constructor", "horovod", "deepspeed"])
def test_collectives_across_two_processes(tmp_path: Path, how: str) -> None:
    chief, worker = run_ranks(tmp_path, 2, how)
    for r in (chief, worker):
        assert r["allgather"] == [0, 10] and r["allgather_local"] == ["l0", "l1"]
        assert r["broadcast"] == "chief's" and r["broadcast_local"] == 999
    assert chief["gather"] == [{"r": 0}, {"r": 1}] and worker["gather"] is None
    assert chief["gather_local"] == [0, 1] and worker["gather_local"] is None


def test_three_ranks_keep_rank_order(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, 3, "constructor")
    assert all(r["allgather"] == [0, 10, 20] for r in results)
    assert results[0]["gather"] == [{"r": 0}, {"r": 1}, {"r": 2}]


def test_a_stranger_without_the_key_is_refused() -> None:
    """The hub drops a peer that cannot prove the key and goes on waiting for real ones."""
    port = free_port()
    hub = Hub(socket.AF_INET, ("127.0.0.1", port), 1, b"right")
    waiting = threading.Thread(target=hub.peers)
    waiting.start()
    with pytest.raises(ExchangeError, match="did not let this rank in"):
        Spoke(socket.AF_INET, ("127.0.0.1", port), 1, b"wrong", timeout=5)
    rank1 = Spoke(socket.AF_INET, ("127.0.0.1", port), 1, b"right", timeout=5)
    waiting.join(10)
    assert not waiting.is_alive() and len(hub.peers()) == 1
    rank1.send({"x": 1})
    assert hub.gather() == [{"x": 1}]
    rank1.close()
    hub.close()


def test_single_process_needs_no_socket() -> None:
    dist = core.DistributedContext()
    assert dist.allgather(1) == [1] and dist.gather(1) == [1] and dist.broadcast(1) == 1
    assert core.DummyDistributedContext().get_size() == 1
    with pytest.raises(ValueError, match="chief_ip"):
        core.DistributedContext(rank=0, size=4, local_rank=0, local_size=2, cross_rank=0,
                                cross_size=2)


def test_a_missing_chief_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ExchangeError, match="no rank listens"):
            Spoke(socket.AF_INET, ("127.0.0.1", port), 1, b"k", timeout=0.2)


STAGE4 = '''
"""Determined's Core API tutorial, stage 4, in our words: each worker builds its own
DistributedContext from the launcher's ranks and passes it to core.init()."""
import logging, os
import determined as det

logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
info = det.get_cluster_info()
env = os.environ
distributed = det.core.DistributedContext(
    rank=int(env["RANK"]), size=int(env["WORLD_SIZE"]), local_rank=int(env["LOCAL_RANK"]),
    local_size=int(env["LOCAL_WORLD_SIZE"]), cross_rank=int(env["GROUP_RANK"]),
    cross_size=int(env["GROUP_WORLD_SIZE"]), chief_ip=info.container_addrs[0])
with det.core.init(distributed=distributed) as core_context:
    x, rank = 0, core_context.distributed.rank
    for batch in range(20):
        x += sum(core_context.distributed.allgather(info.trial.hparams["increment_by"]))
        steps_completed = batch + 1
        if steps_completed % 10 == 0:
            if rank == 0:
                core_context.train.report_training_metrics(
                    steps_completed=steps_completed, metrics={"x": x})
                core_context.train.report_validation_metrics(
                    steps_completed=steps_completed, metrics={"x": x})
                core_context.train.report_progress(steps_completed / 20)
            if core_context.preempt.should_preempt():
                break
    seen = core_context.distributed.gather(rank)
    said = core_context.distributed.broadcast("hello from the chief" if rank == 0 else None)
    logging.info(f"rank {rank}: x={x} gathered={seen} heard={said!r}")
'''


@pytest.mark.slow
def test_tutorial_stage4_shape_runs_with_two_slots(served: Served, tmp_path: Path) -> None:
    """`python3 -m determined.launch.torch_distributed python3 stage4.py` on 2 slots
    completes with the chief's metrics, which are also TensorBoard events in storage."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "stage4.py").write_text(STAGE4)
    (ctx / "stage4.yaml").write_text(textwrap.dedent("""\
        name: core-api-stage-4-own
        entrypoint: python3 -m determined.launch.torch_distributed python3 stage4.py
        resources:
          slots_per_trial: 2
        hyperparameters:
          increment_by: 3
        searcher:
          name: single
          metric: x
        max_restarts: 0
        """))
    out = served.cli("e", "create", str(ctx / "stage4.yaml"), str(ctx)).stdout
    exp_id = int(out.split("Created experiment ")[1].split()[0])
    exp = served.wait_experiment(exp_id, timeout=180)
    logs = served.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert "rank 0: x=120 gathered=[0, 1] heard='hello from the chief'" in logs
    assert "rank 1: x=120 gathered=None heard='hello from the chief'" in logs
    for group in ("training", "validation"):
        got = served.api("GET", f"/api/v1/trials/1/metrics?group={group}")["metrics"]
        assert [(m["stepsCompleted"], m["metrics"]["avgMetrics"]["x"]) for m in got] == [
            (10, 60), (20, 120)]
    (tb_dir,) = (served.state_dir / "checkpoints").glob("*/tensorboard/experiment/1/trial/1")
    assert scalars(tb_dir) == {"Determined/x": [(10, 60.0), (20, 120.0)],
                               "Determined/val_x": [(10, 60.0), (20, 120.0)]}


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard itself reads from `logdir`: each scalar tag's (step, value)s."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]}
