"""The training loop of a PyTorchTrial: batches, periods, metrics, checkpoints, preemption.

Follows Determined's PyTorchTrial controller: train to each searcher operation's length,
report training metrics every `scheduling_unit` batches, validate every
`min_validation_period` and at the end of an operation, checkpoint every
`min_checkpoint_period` and at the end, and on preemption checkpoint and exit 0. A restart
resumes from the latest checkpoint with the same batch count, epoch and position.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dettui import core
from dettui.core._searcher import configured_length
from dettui.pytorch._trial import (
    LRScheduler,
    PyTorchTrial,
    as_loader,
)

log = logging.getLogger("dettui.pytorch")
STATE_FILE = "state_dict.pth"


@dataclass(frozen=True)
class Units:
    """What one "length" is worth in batches for this trial."""

    global_batch_size: int
    records_per_epoch: int
    batches_per_epoch: int

    def batches(self, length: Any, what: str) -> int:
        """{batches: N} | {records: N} | {epochs: N} (or a bare int of batches) → batches."""
        if isinstance(length, int):
            return length
        if not isinstance(length, dict) or len(length) != 1:
            raise ValueError(f"{what} must be one of {{batches: N}}, {{records: N}} or "
                             f"{{epochs: N}}, not {length!r}")
        unit, value = next(iter(length.items()))
        value = int(value)
        if unit == "batches":
            return value
        if unit == "records":
            return max(1, math.ceil(value / self.global_batch_size)) if value else 0
        if unit == "epochs":
            if self.records_per_epoch:
                per_epoch = max(1, self.records_per_epoch // self.global_batch_size)
            else:
                per_epoch = self.batches_per_epoch
            return value * per_epoch
        raise ValueError(f"{what}: unknown unit '{unit}' (batches, records or epochs)")


def _scalar(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().float().mean().item() if value.numel() else float("nan")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _as_metrics(out: Any, what: str) -> dict[str, Any]:
    if isinstance(out, torch.Tensor):
        return {"loss": _scalar(out)}
    if not isinstance(out, dict):
        raise TypeError(f"{what} must return a dict of metrics (or a loss tensor), "
                        f"not {type(out).__name__}")
    return {str(k): _scalar(v) for k, v in out.items()}


def _mean(rows: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """Weighted mean of numeric metrics over (metrics, weight) rows; others keep the last."""
    sums: dict[str, float] = {}
    weights: dict[str, int] = {}
    last: dict[str, Any] = {}
    for metrics, weight in rows:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[key] = sums.get(key, 0.0) + float(value) * weight
                weights[key] = weights.get(key, 0) + weight
            else:
                last[key] = value
    out = dict(last)
    out.update({k: sums[k] / weights[k] for k in sums if weights[k]})
    return out


def _batch_len(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    return 1


class Controller:
    def __init__(self, trial_class: type[PyTorchTrial], ctx: core.Context,
                 hparams: dict[str, Any], config: dict[str, Any]) -> None:
        self.core = ctx
        self.dist = ctx.distributed
        self.config = config
        seed = ctx.info.trial.trial_seed if ctx.info else 0
        self.seed = seed
        _seed_everything(seed + self.dist.rank)
        self.context = trial_class.trial_context_class(ctx, hparams, config, _device(self.dist))
        self.trial = trial_class(self.context)
        self.context.get_global_batch_size()  # a clear error before any data is read
        self.train_loader = as_loader(self.trial.build_training_data_loader(), self.dist.rank,
                                      self.dist.size, seed, "build_training_data_loader")
        self.val_loader = as_loader(self.trial.build_validation_data_loader(), self.dist.rank,
                                    self.dist.size, seed, "build_validation_data_loader")
        if len(self.train_loader) == 0:
            raise ValueError("the training data loader is empty for rank "
                             f"{self.dist.rank}")
        self.units = Units(self.context.get_global_batch_size(),
                           int(config.get("records_per_epoch") or 0), len(self.train_loader))
        self.scheduling_unit = max(1, int(config.get("scheduling_unit") or 100))
        self.val_period = self.units.batches(config.get("min_validation_period") or
                                             {"batches": 0}, "min_validation_period")
        self.ckpt_period = self.units.batches(config.get("min_checkpoint_period") or
                                              {"batches": 0}, "min_checkpoint_period")
        self.full_dataset = (type(self.trial).evaluate_full_dataset
                             is not PyTorchTrial.evaluate_full_dataset)
        self.batches = 0
        self.last_val = self.last_ckpt = 0
        self.pending: list[tuple[dict[str, Any], int]] = []
        self._iter: Any = None
        self._epoch = -1
        self.searcher_metric = (config.get("searcher") or {}).get("metric")

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self._restore()
        for op in self._operations():
            target = self.units.batches(_op_length(op, self.config), "searcher.max_length")
            metric = None
            while self.batches < target:
                self._train_one()
                if self.batches % self.scheduling_unit == 0 or self.batches == target:
                    self._report_training()
                    op.report_progress(_in_units(self.batches, op, self.config, self.units))
                if self.val_period and self.batches - self.last_val >= self.val_period:
                    metric = self._validate()
                if self.ckpt_period and self.batches - self.last_ckpt >= self.ckpt_period:
                    self._checkpoint()
                if self._should_stop():
                    self._report_training()
                    if self.last_ckpt != self.batches:
                        self._checkpoint()
                    self._say(f"stopped at batch {self.batches}: checkpointed, exiting")
                    return
            self._report_training()
            if self.last_val != self.batches or metric is None:
                metric = self._validate()
            op.report_completed(metric)
        if self.last_ckpt != self.batches:
            self._checkpoint()
        self._say(f"training done after {self.batches} batches")

    def _operations(self) -> Any:
        if self.core.info is not None:
            return self.core.searcher.operations()
        raw = configured_length(self.config)
        if raw is None:
            raise ValueError("searcher.max_length (or max_time with time_metric batches, "
                             "records or epochs) is needed to run a trial class")
        length = next(iter(raw.values())) if isinstance(raw, dict) else raw
        return [_LocalOperation(int(length))]

    def _train_one(self) -> None:
        epoch, batch_idx = divmod(self.batches, len(self.train_loader))
        if self._iter is None or epoch != self._epoch:
            self._iter = iter(self.train_loader.batches(epoch, batch_idx))
            self._epoch = epoch
        batch = self.context.to_device(next(self._iter))
        self.context._batch_idx = batch_idx  # type: ignore[attr-defined]
        epoch_end = batch_idx == len(self.train_loader) - 1
        self.context._epoch_end = epoch_end  # type: ignore[attr-defined]
        for model in self.context.models:
            model.train()
        out = self.trial.train_batch(batch, epoch, batch_idx)
        self.pending.append((_as_metrics(out, "train_batch"), 1))
        self.batches += 1
        for sched in self.context.lr_schedulers:
            mode = sched.step_mode
            if mode is LRScheduler.StepMode.STEP_EVERY_BATCH or (
                    mode is LRScheduler.StepMode.STEP_EVERY_EPOCH and epoch_end):
                sched.step()

    def _should_stop(self) -> bool:
        stop = bool(self.dist.broadcast(self.context.get_stop_requested()
                                        if self.dist.is_chief else None))
        return stop or self.core.preempt.should_preempt()

    # -- metrics ----------------------------------------------------------------------------

    def _report_training(self) -> None:
        if not self.pending:
            return
        mine = _mean(self.pending)
        count = len(self.pending)
        self.pending = []
        rows = self.dist.allgather((mine, count))
        if self.dist.is_chief:
            self.core.train.report_training_metrics(steps_completed=self.batches,
                                                    metrics=_mean(rows))

    def _validate(self) -> Any:
        for model in self.context.models:
            model.eval()
        with torch.no_grad():
            if self.full_dataset:
                metrics = None
                if self.dist.is_chief:
                    metrics = _as_metrics(self.trial.evaluate_full_dataset(
                        self.val_loader.loader if hasattr(self.val_loader, "loader")
                        else self.val_loader), "evaluate_full_dataset")
                metrics = self.dist.broadcast(metrics)
            else:
                rows = []
                for i, batch in enumerate(self.val_loader.batches(0)):
                    out = self.trial.evaluate_batch(self.context.to_device(batch), i)
                    rows.append((_as_metrics(out, "evaluate_batch"), _batch_len(batch)))
                metrics = _mean([r for part in self.dist.allgather(rows) for r in part])
        for model in self.context.models:
            model.train()
        self.last_val = self.batches
        # Trainers add the time metrics ASHA reads (SEMANTICS §6: no unit conversion).
        metrics.setdefault("batches", self.batches)
        metrics.setdefault("records", self.batches * self.units.global_batch_size)
        metrics.setdefault("epochs", self.batches / max(self.units.batches({"epochs": 1},
                                                                            "epochs"), 1))
        if self.searcher_metric and self.searcher_metric not in metrics:
            raise KeyError(f"searcher.metric '{self.searcher_metric}' is not among the "
                           f"validation metrics {sorted(metrics)}")
        if self.dist.is_chief:
            self.core.train.report_validation_metrics(steps_completed=self.batches,
                                                      metrics=metrics)
            shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in sorted(metrics.items()))
            self._say(f"validation at batch {self.batches}: {shown}")
        return metrics.get(self.searcher_metric) if self.searcher_metric else None

    # -- checkpoints ------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "models_state_dict": [_unwrap(m).state_dict() for m in self.context.models],
            "optimizers_state_dict": [o.state_dict() for o in self.context.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in self.context.lr_schedulers],
            "batches_trained": self.batches,
            "rng_state": {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(),
                          "random": random.getstate()},
        }

    def _checkpoint(self) -> None:
        self.last_ckpt = self.batches
        if self.dist.is_chief:
            metadata = {"steps_completed": self.batches, "framework": f"torch-{torch.__version__}",
                        "format": "pickle"}
            with self.core.checkpoint.store_path(metadata) as (path, uuid):
                torch.save(self._state(), path / STATE_FILE)
                (path / "load_data.json").write_text(json.dumps(
                    {"trial_type": "PyTorchTrial", "batches_trained": self.batches}))
            self._say(f"checkpoint {uuid} at batch {self.batches}")
        self.dist.broadcast(None)  # everyone waits for the chief's checkpoint

    def _restore(self) -> None:
        latest = self.core.info.latest_checkpoint if self.core.info else None
        if not latest:
            return
        with self.core.checkpoint.restore_path(latest) as path:
            state = torch.load(Path(path) / STATE_FILE, map_location=self.context.device,
                               weights_only=False)
        models, opts = state["models_state_dict"], state["optimizers_state_dict"]
        if len(models) != len(self.context.models) or len(opts) != len(self.context.optimizers):
            raise RuntimeError(f"checkpoint {latest} holds {len(models)} model(s) and "
                               f"{len(opts)} optimizer(s); the trial wrapped "
                               f"{len(self.context.models)} and {len(self.context.optimizers)}")
        for model, sd in zip(self.context.models, models, strict=True):
            _unwrap(model).load_state_dict(sd)
        for opt, sd in zip(self.context.optimizers, opts, strict=True):
            opt.load_state_dict(sd)
        for sched, sd in zip(self.context.lr_schedulers, state["lr_schedulers_state_dict"],
                             strict=False):
            sched.load_state_dict(sd)
        self.batches = self.last_val = self.last_ckpt = int(state["batches_trained"])
        rng = state.get("rng_state") or {}
        if "cpu" in rng and self.dist.size == 1:
            torch.set_rng_state(rng["cpu"])
            np.random.set_state(rng["numpy"])
            random.setstate(rng["random"])
        self._say(f"resumed from checkpoint {latest} at batch {self.batches}")

    def _say(self, text: str) -> None:
        if self.dist.is_chief:
            print(text, flush=True)


class _LocalOperation:
    """Off a cluster: one operation of searcher.max_length, progress only logged."""

    def __init__(self, length: int) -> None:
        self.length = length

    def report_progress(self, length: float) -> None:
        log.debug("progress %.1f of %d", length, self.length)

    def report_completed(self, searcher_metric: Any = None) -> None:
        log.info("searcher operation done: %s", searcher_metric)


def _op_length(op: Any, config: dict[str, Any]) -> Any:
    raw = configured_length(config)
    if isinstance(raw, dict):
        return {next(iter(raw)): op.length}
    return int(op.length)


def _in_units(batches: int, op: Any, config: dict[str, Any], units: Units) -> float:
    """`batches` expressed in the unit of op.length, for progress."""
    total = units.batches(_op_length(op, config), "searcher.max_length")
    return op.length * batches / total if total else float(op.length)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


def _device(dist: core.DistributedContext) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", dist.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
