"""Two interleaved spirals, a small MLP, and the dettui Core API.

Runs on a dettui cluster (`dettui e create single.yaml .`) and anywhere else
(`python train.py`): off-cluster, core.init() gives a dummy context that logs locally.
Reports training loss every 10 batches, validates every 50, checkpoints every 100 and at the
end, resumes from the latest checkpoint, and stops cleanly when preempted.
"""

from __future__ import annotations

import logging
import math
import time

import torch
from torch import nn

from dettui import core

DEFAULTS = {"learning_rate": 0.03, "hidden": 64, "batch_size": 64}
MAX_BATCHES = 200
VALIDATE_EVERY = 50
CHECKPOINT_EVERY = 100


def spirals(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g) * 3 * math.pi + 0.5
    label = torch.randint(0, 2, (n,), generator=g)
    sign = label.float() * 2 - 1
    x = torch.stack([sign * t * torch.cos(t), sign * t * torch.sin(t)], dim=1) / 10
    x += 0.02 * torch.randn(n, 2, generator=g)
    return x, label


def model_for(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 2))


def validate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return {"validation_loss": loss, "accuracy": accuracy}


def lengths(ctx: core.Context) -> tuple[int, int, int]:
    """(batches to train, validate every, checkpoint every) from the experiment config: the
    `max_batches` hyperparameter, else the searcher's max_time (ASHA, in batches); a
    searcher.max_length (deprecated, but Determined's older examples set it) wins over both;
    and the min_*_period keys."""
    if ctx.info is None:
        return MAX_BATCHES, VALIDATE_EVERY, CHECKPOINT_EVERY
    config = ctx.info.trial.config
    searcher = config.get("searcher") or {}
    legacy = searcher.get("max_length")
    length = ((legacy.get("batches") if isinstance(legacy, dict) else legacy)
              or ctx.info.trial.hparams.get("max_batches") or searcher.get("max_time"))
    val = (config.get("min_validation_period") or {}).get("batches") or VALIDATE_EVERY
    ckpt = (config.get("min_checkpoint_period") or {}).get("batches") or CHECKPOINT_EVERY
    return int(length or MAX_BATCHES), int(val), int(ckpt)


def main(ctx: core.Context) -> None:
    hp = ctx.info.trial.hparams if ctx.info else DEFAULTS
    max_batches, validate_every, checkpoint_every = lengths(ctx)
    torch.manual_seed(ctx.info.trial.trial_seed if ctx.info else 0)
    x_train, y_train = spirals(4096, seed=1)
    x_val, y_val = spirals(1024, seed=2)
    model = model_for(int(hp["hidden"]))
    opt = torch.optim.Adam(model.parameters(), lr=float(hp["learning_rate"]))
    step = 0
    latest = ctx.info.latest_checkpoint if ctx.info else None
    if latest:
        with ctx.checkpoint.restore_path(latest) as path:
            state = torch.load(path / "state.pt")
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            step = state["steps_completed"]
        print(f"resumed from checkpoint {latest} at step {step}")

    saved = step if latest else None  # the latest checkpoint's step: one per step, not two

    def save() -> None:
        nonlocal saved
        if saved == step:
            return  # resumed here, or saved here already (a preemption at a checkpoint step)
        saved = step
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "steps_completed": step}, path / "state.pt")
        print(f"checkpoint {uuid} at step {step}")

    batch = int(hp["batch_size"])
    step_sleep = float(hp.get("step_sleep", 0))  # to watch it in the queue: seconds per batch
    while step < max_batches:
        if step_sleep:
            time.sleep(step_sleep)
        idx = torch.randint(0, len(x_train), (batch,))
        loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 10 == 0:
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": loss.item()})
        if step % validate_every == 0:
            metrics = {**validate(model, x_val, y_val), "batches": step}
            ctx.train.report_validation_metrics(steps_completed=step, metrics=metrics)
            print(f"step {step}: validation_loss={metrics['validation_loss']:.4f} "
                  f"accuracy={metrics['accuracy']:.3f}")
        if step % checkpoint_every == 0 and step < max_batches:
            save()
        if ctx.preempt.should_preempt():
            save()
            print(f"told to stop at step {step} (preempted, paused or stopped by the searcher): "
                  "checkpointed, exiting")
            return
        if step % 50 == 0:
            ctx.train.report_progress(step / max_batches)
    save()
    print(f"done after {step} steps")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with core.init() as context:
        main(context)
