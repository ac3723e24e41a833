"""Detached mode: train outside the cluster, report to a dettui master.

Start a master (`dettui serve`, no agent needed), then run this script directly:

    python sample_ctx/detached.py                        # one process
    python sample_ctx/detached.py --external-id run-1    # run again to resume the same trial
    python -m torch.distributed.run --nproc_per_node 2 sample_ctx/detached.py   # two ranks

It trains the spirals MLP of train.py, reports training and validation metrics, and stores a
sharded checkpoint (every rank writes its own file into the same checkpoint). The run appears in
`dettui e list`, `dettui e describe <id>` and `dettui t logs <trial id>` like any experiment.
With torch.distributed only rank 0 creates the experiment and trial; the others learn their ids
from it.
"""

from __future__ import annotations

import argparse
import logging
import os

import torch
from torch import nn
from train import model_for, spirals, validate

from dettui import core

VALIDATE_EVERY = 50


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--master", help="master URL (default: DET_MASTER or http://127.0.0.1:8080)")
    p.add_argument("--name", default="spirals-detached", help="experiment name")
    p.add_argument("--steps", type=int, default=100, help="train until this many batches")
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--external-id", help="experiment and trial id to resume across runs")
    p.add_argument("--checkpoint-dir", help="checkpoint directory (default: dettui's data dir)")
    return p.parse_args()


def distributed() -> core.DistributedContext | None:
    """Under torchrun: a gloo process group for DDP, and dettui's DistributedContext."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    torch.distributed.init_process_group("gloo")
    return core.DistributedContext.from_torch_distributed()


def main(ctx: core.Context, steps: int) -> None:
    assert ctx.info is not None
    hp = ctx.info.trial.hparams
    rank, size = ctx.distributed.rank, ctx.distributed.size
    torch.manual_seed(0)
    x_train, y_train = spirals(4096, seed=1)
    x_val, y_val = spirals(1024, seed=2)
    model = model_for(int(hp["hidden"]))
    opt = torch.optim.Adam(model.parameters(), lr=float(hp["learning_rate"]))
    step = 0
    if ctx.info.latest_checkpoint:
        with ctx.checkpoint.restore_path(ctx.info.latest_checkpoint) as path:
            state = torch.load(path / f"state_rank{rank}.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["steps_completed"]
        print(f"resumed from checkpoint {ctx.info.latest_checkpoint} at step {step}")
    resumed = step if ctx.info.latest_checkpoint else -1
    net = nn.parallel.DistributedDataParallel(model) if size > 1 else model
    generator = torch.Generator().manual_seed(1000 + step)
    while step < steps:
        idx = torch.randint(0, len(x_train), (64,), generator=generator)[rank::size]
        loss = nn.functional.cross_entropy(net(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 10 == 0:
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": loss.item()})
        if step % VALIDATE_EVERY == 0 or step == steps:
            metrics = validate(model, x_val, y_val)
            ctx.train.report_validation_metrics(steps_completed=step, metrics=metrics)
            print(f"step {step}: validation_loss={metrics['validation_loss']:.4f} "
                  f"accuracy={metrics['accuracy']:.3f}")
        ctx.train.report_progress(step / steps)
    if step > resumed:  # (resumed at the end: its checkpoint is this step's already)
        # A sharded checkpoint: every rank writes its own file into the same directory.
        metadata = {"steps_completed": step, f"rank_{rank}": "ok"}
        with ctx.checkpoint.store_path(metadata, shard=True) as (path, uuid):
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "steps_completed": step}, path / f"state_rank{rank}.pt")
        print(f"checkpoint {uuid} at step {step}")
    if rank == 0:
        exp_id = ctx.info.trial.experiment_id
        print(f"experiment {exp_id} trial {ctx.info.trial.trial_id}: done after {step} steps; "
              f"see `dettui e describe {exp_id}`")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args()
    config = core.DetachedConfig(
        master=args.master, name=args.name,
        hparams={"learning_rate": args.lr, "hidden": args.hidden},
        searcher={"name": "single", "metric": "validation_loss", "smaller_is_better": True},
        checkpoint_storage=args.checkpoint_dir,
        external_experiment_id=args.external_id,
        external_trial_id="trial-1" if args.external_id else None,
    )
    with core.init(detached=config, distributed=distributed()) as context:
        main(context, args.steps)
