"""DDP on CPU (gloo) with sharded checkpoints through the Core API.

Every rank trains on its own shard of the data; `torch.distributed.checkpoint` writes one
shard per rank into the same checkpoint directory (`store_path(shard=True)`), and a restart
resumes from it. Run on a cluster with the torch_distributed launcher (see ddp.yaml), or
locally: `torchrun --nproc_per_node 2 ddp.py`.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dettui import core

MAX_BATCHES = 60  # unless hyperparameters.max_batches says otherwise
CHECKPOINT_EVERY = 20


def data(rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 8, generator=g)
    y = x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(2048, generator=g)
    return x[rank::size], y[rank::size]


def main(ctx: core.Context) -> None:
    rank, size = ctx.distributed.rank, ctx.distributed.size
    hp = ctx.info.trial.hparams if ctx.info else {"learning_rate": 0.05, "fail_rank": -1}
    model = DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=float(hp["learning_rate"]))
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    step = 0
    latest = ctx.info.latest_checkpoint if ctx.info else None
    if latest:
        with ctx.checkpoint.restore_path(latest) as path:
            dcp.load(state, checkpoint_id=path)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            step = int(ctx.checkpoint.get_metadata(latest)["steps_completed"])
        print(f"resumed from checkpoint {latest} at step {step}", flush=True)
    x, y = data(rank, size)
    run = ctx.info.trial.trial_run_id if ctx.info else 1
    step_sleep = float(hp.get("step_sleep", 0))
    max_batches = int(hp.get("max_batches", MAX_BATCHES))
    while step < max_batches:
        if step_sleep:
            time.sleep(step_sleep)
        idx = torch.randint(0, len(x), (32,))
        loss = nn.functional.mse_loss(model(x[idx]).squeeze(1), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if rank == int(hp.get("fail_rank", -1)) and step == int(hp.get("fail_at", 30)) and run == 1:
            print(f"rank {rank} fails on purpose at step {step}", flush=True)
            sys.exit(3)
        if step % 10 == 0:
            total = torch.tensor([loss.item()])
            dist.all_reduce(total)
            if rank == 0:
                ctx.train.report_training_metrics(step, {"loss": total.item() / size})
        if step % CHECKPOINT_EVERY == 0 or step == max_batches:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
            metadata = {"steps_completed": step, f"rank_{rank}": "ok"}
            with ctx.checkpoint.store_path(metadata, shard=True) as (path, uuid):
                dcp.save(state, checkpoint_id=path)
            if rank == 0:
                ctx.train.report_validation_metrics(step, {"validation_loss": loss.item()})
                print(f"sharded checkpoint {uuid} at step {step}", flush=True)
                ctx.train.report_progress(step / max_batches)
        if ctx.preempt.should_preempt():
            return
    print(f"rank {rank} of {size} done after {step} steps (pid {os.getpid()})", flush=True)


if __name__ == "__main__":
    dist.init_process_group("gloo")
    distributed = core.DistributedContext.from_torch_distributed()
    with core.init(distributed=distributed) as context:
        main(context)
    dist.destroy_process_group()
