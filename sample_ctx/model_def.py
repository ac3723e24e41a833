"""The spirals MLP as a trial class: the harness owns the loop, periods, checkpoints, DDP.

Run it with `dettui e create trial.yaml .` (entrypoint `model_def:SpiralsTrial`, one or two
slots), or off a cluster: `python -m dettui.launch.harness model_def:SpiralsTrial --config
trial.yaml`.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from dettui import pytorch


def spirals(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g) * 3 * math.pi + 0.5
    label = torch.randint(0, 2, (n,), generator=g)
    sign = label.float() * 2 - 1
    x = torch.stack([sign * t * torch.cos(t), sign * t * torch.sin(t)], dim=1) / 10
    x += 0.02 * torch.randn(n, 2, generator=g)
    return TensorDataset(x, label)


class SpiralsTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        hidden = int(context.get_hparam("hidden"))
        self.model = context.wrap_model(nn.Sequential(
            nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 2)))
        self.opt = context.wrap_optimizer(torch.optim.Adam(
            self.model.parameters(), lr=float(context.get_hparam("learning_rate"))))
        self.step_sleep = float(context.get_hparams().get("step_sleep", 0))
        dist = context.distributed
        print(f"rank {dist.rank} of {dist.size}: per-slot batch size "
              f"{context.get_per_slot_batch_size()}", flush=True)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if self.step_sleep:
            time.sleep(self.step_sleep)
        x, y = batch
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {"validation_loss": nn.functional.cross_entropy(logits, y),
                "accuracy": (logits.argmax(1) == y).float().mean()}

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(spirals(4096, seed=1), shuffle=True, drop_last=True,
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(spirals(1024, seed=2),
                                  batch_size=self.context.get_per_slot_batch_size())
