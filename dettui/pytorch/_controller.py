"""The training loop of a PyTorchTrial: batches, periods, metrics, checkpoints, preemption.

Follows Determined's PyTorchTrial controller: train to the length asked (`Trainer.fit`'s
`max_length`, else the searcher operation's), report training metrics every reporting period
(`scheduling_unit` batches), validate every validation period and at the end, checkpoint every
checkpoint period and at the end, and on preemption checkpoint and exit 0. A restart resumes
from the latest checkpoint with the same batch count, epoch and position. Callbacks are called
at Determined's points, wrapped reducers join each window's metrics, `evaluate_batch` gets
`batch_idx` only when it takes it.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dettui import core
from dettui.core._searcher import configured_length
from dettui.pytorch import _reducer
from dettui.pytorch._data import as_loader
from dettui.pytorch._trial import LRScheduler, PyTorchTrial, PyTorchTrialContext
from dettui.pytorch._units import Period, Units, _as_metrics, _batch_len, _mean, accepts

__all__ = ["Controller", "FitOptions", "Units", "_mean"]
log = logging.getLogger("dettui.pytorch")
STATE_FILE = "state_dict.pth"


@dataclass(frozen=True)
class FitOptions:
    """What `Trainer.fit` may set; None takes the experiment config's value."""

    max_length: Any = None  # a {unit: n} length, or None for the searcher's operations
    validation_period: Any = None  # a {unit: n} length, n an int or a frozenset of counts
    checkpoint_period: Any = None
    reporting_period: Any = None  # a {unit: n} length
    latest_checkpoint: str | None = None
    use_cluster_checkpoint: bool = True  # off: only `latest_checkpoint` resumes
    step_zero_validation: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Controller:
    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext, ctx: core.Context,
                 config: dict[str, Any], options: FitOptions | None = None) -> None:
        self.core, self.dist, self.config = ctx, ctx.distributed, config
        self.options = options or FitOptions()
        self.seed = ctx.info.trial.trial_seed if ctx.info else 0
        self.context, self.trial = context, trial
        self.callbacks = dict(trial.build_callbacks() or {})
        self.train_loader = as_loader(trial.build_training_data_loader(), self.dist.rank,
                                      self.dist.size, self.seed, "build_training_data_loader")
        self.val_loader = as_loader(trial.build_validation_data_loader(), self.dist.rank,
                                    self.dist.size, self.seed, "build_validation_data_loader")
        if len(self.train_loader) == 0:
            raise ValueError(f"the training data loader is empty for rank {self.dist.rank}")
        self.units = Units(context.get_global_batch_size(),
                           int(config.get("records_per_epoch") or 0), len(self.train_loader))
        reporting = self.options.reporting_period
        self.scheduling_unit = max(1, self.units.batches(reporting, "reporting_period")
                                   if reporting else int(config.get("scheduling_unit") or 100))
        self.val_period = self._period(self.options.validation_period, "min_validation_period")
        self.ckpt_period = self._period(self.options.checkpoint_period, "min_checkpoint_period")
        self.full_dataset = (type(trial).evaluate_full_dataset
                             is not PyTorchTrial.evaluate_full_dataset)
        self.batches = 0
        self.last_val = self.last_ckpt = 0
        self.pending: list[tuple[dict[str, Any], int]] = []
        self._iter: Any = None
        self._epoch = -1
        self.searcher_metric = (config.get("searcher") or {}).get("metric")
        self.last_metric: Any = None

    @classmethod
    def for_class(cls, trial_class: type[PyTorchTrial], ctx: core.Context,
                  hparams: dict[str, Any], config: dict[str, Any]) -> Controller:
        """The harness's way: build the context and the trial, then the loop."""
        _seed_everything((ctx.info.trial.trial_seed if ctx.info else 0) + ctx.distributed.rank)
        context = trial_class.trial_context_class(ctx, hparams, config, _device(ctx.distributed))
        trial = trial_class(context)
        context.get_global_batch_size()  # a clear error before any data is read
        return cls(trial, context, ctx, config)

    def _period(self, given: Any, key: str) -> Period:
        if isinstance(given, dict) and given and isinstance(next(iter(given.values())),
                                                            frozenset):
            unit, steps = next(iter(given.items()))
            return Period(at=frozenset(self.units.batches({unit: n}, key) for n in steps))
        raw = given if given is not None else (self.config.get(key) or {"batches": 0})
        return Period(every=self.units.batches(raw, key))

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self._restore()
        self._call("on_trial_startup", self.batches, self._latest())
        try:
            self._call("on_training_start")
            if self.options.step_zero_validation and self.batches == 0:
                self._validate()
            for op in self._operations():
                target = self.units.batches(_op_length(op, self.config), "max_length")
                if self._train_to(target, op):
                    return
                self._report_training()
                metric = self.last_metric
                if self.last_val != self.batches or metric is None:
                    metric = self._validate()
                op.report_completed(metric)
            if self.last_ckpt != self.batches:
                self._checkpoint()
            self._say(f"training done after {self.batches} batches")
        finally:
            self._call("on_trial_shutdown")

    def _train_to(self, target: int, op: Any) -> bool:
        """Train until `target` batches; True if stopped early (preempted or asked to)."""
        self.last_metric = None
        while self.batches < target:
            self._train_one()
            if self.batches % self.scheduling_unit == 0 or self.batches == target:
                self._report_training()
                op.report_progress(_in_units(self.batches, op, self.config, self.units))
            if self.val_period.due(self.batches, self.last_val):
                self.last_metric = self._validate()
            if self.ckpt_period.due(self.batches, self.last_ckpt):
                self._checkpoint()
            if self._should_stop():
                self._report_training()
                if self.last_ckpt != self.batches:
                    self._checkpoint()
                self._say(f"stopped at batch {self.batches}: checkpointed, exiting")
                return True
        return False

    def _operations(self) -> Any:
        if self.options.max_length is not None:
            return [_FitOperation(self.core, self.options.max_length)]
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
            self._call("on_training_epoch_start", epoch)
        batch = self.context.to_device(next(self._iter))
        epoch_end = batch_idx == len(self.train_loader) - 1
        ctx = self.context
        ctx._batch_idx, ctx._epoch_end = batch_idx, epoch_end
        ctx._batches_trained, ctx._epochs_trained = self.batches, epoch
        for model in ctx.models:
            model.train()
        out = self._call_train_batch(batch, epoch, batch_idx)
        if ctx._scaler is not None:
            ctx._scaler.update()
        self.pending.append((_as_metrics(out, "train_batch"), 1))
        self.batches += 1
        ctx._batches_trained = self.batches
        for sched in ctx.lr_schedulers:
            mode = sched.step_mode
            if mode is LRScheduler.StepMode.STEP_EVERY_BATCH or (
                    mode is LRScheduler.StepMode.STEP_EVERY_EPOCH and epoch_end):
                sched.step()
        if epoch_end:
            self._call("on_training_epoch_end", epoch)

    def _call_train_batch(self, batch: Any, epoch: int, batch_idx: int) -> Any:
        fn = self.trial.train_batch
        kwargs = {}
        if accepts(fn, "epoch_idx", 2):
            kwargs["epoch_idx"] = epoch
        if accepts(fn, "batch_idx", 3):
            kwargs["batch_idx"] = batch_idx
        return fn(batch, **kwargs)

    def _should_stop(self) -> bool:
        stop = bool(self.dist.broadcast(self.context.get_stop_requested()
                                        if self.dist.is_chief else None))
        return stop or self.core.preempt.should_preempt()

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks.values():
            getattr(callback, hook)(*args)

    # -- metrics ----------------------------------------------------------------------------

    def _report_training(self) -> None:
        if not self.pending:
            return
        batch_metrics = [m for m, _ in self.pending]
        mine = _mean(self.pending)
        count = len(self.pending)
        self.pending = []
        rows = self.dist.allgather((mine, count))
        metrics = _mean(rows)
        metrics.update(_reducer.reduce_wrapped(self.context.reducers, self.dist.allgather,
                                               self.dist.is_chief, training=True))
        if self.dist.is_chief:
            self.core.train.report_training_metrics(steps_completed=self.batches,
                                                    metrics=metrics)
        self._call("on_training_workload_end", metrics, batch_metrics)

    def _validate(self) -> Any:
        self._call("on_validation_start")
        for model in self.context.models:
            model.eval()
        with torch.no_grad():
            metrics = self._full_dataset() if self.full_dataset else self._batches_metrics()
        metrics.update(_reducer.reduce_wrapped(self.context.reducers, self.dist.allgather,
                                               self.dist.is_chief, training=False))
        for model in self.context.models:
            model.train()
        self.last_val = self.batches
        # Trainers add the time metrics ASHA reads (SEMANTICS §6: no unit conversion).
        metrics.setdefault("batches", self.batches)
        metrics.setdefault("records", self.batches * self.units.global_batch_size)
        metrics.setdefault("epochs", self.batches / max(self.units.batches({"epochs": 1},
                                                                            "epochs"), 1))
        if self.searcher_metric and self.searcher_metric not in metrics and self.dist.is_chief:
            raise KeyError(f"searcher.metric '{self.searcher_metric}' is not among the "
                           f"validation metrics {sorted(metrics)}")
        if self.dist.size > 1 and self.callbacks:
            metrics = self.dist.broadcast(metrics if self.dist.is_chief else None)
        self._call("on_validation_end", metrics)
        if self.dist.is_chief:
            self.core.train.report_validation_metrics(steps_completed=self.batches,
                                                      metrics=metrics)
            shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in sorted(metrics.items()))
            self._say(f"validation at batch {self.batches}: {shown}")
        self.last_metric = metrics.get(self.searcher_metric) if self.searcher_metric else None
        return self.last_metric

    def _full_dataset(self) -> dict[str, Any]:
        metrics = None
        if self.dist.is_chief:
            loader = getattr(self.val_loader, "loader", self.val_loader)
            metrics = _as_metrics(self.trial.evaluate_full_dataset(loader),
                                  "evaluate_full_dataset")
        return dict(self.dist.broadcast(metrics))

    def _batches_metrics(self) -> dict[str, Any]:
        self._call("on_validation_epoch_start")
        with_idx = accepts(self.trial.evaluate_batch, "batch_idx", 2)
        rows, outputs = [], []
        for i, batch in enumerate(self.val_loader.batches(0)):
            batch = self.context.to_device(batch)
            out = (self.trial.evaluate_batch(batch, batch_idx=i) if with_idx
                   else self.trial.evaluate_batch(batch))
            metrics = _as_metrics(out, "evaluate_batch")
            outputs.append(metrics)
            rows.append((metrics, _batch_len(batch)))
        self._call("on_validation_epoch_end", outputs)
        all_rows = [r for part in self.dist.allgather(rows) for r in part]
        return _reduced(all_rows, self.trial.evaluation_reducer())

    # -- checkpoints ------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        ctx = self.context
        state = {
            "models_state_dict": [_unwrap(m).state_dict() for m in ctx.models],
            "optimizers_state_dict": [o.state_dict() for o in ctx.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in ctx.lr_schedulers],
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
            "batches_trained": self.batches,
            "rng_state": {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(),
                          "random": random.getstate()},
        }
        if ctx._scaler is not None:
            state["scaler_state_dict"] = ctx._scaler.state_dict()
        return state

    def _checkpoint(self) -> None:
        self.last_ckpt = self.batches
        if self.dist.is_chief:
            metadata = {"steps_completed": self.batches, "framework": f"torch-{torch.__version__}",
                        "format": "pickle"}
            state = self._state()
            self._call("on_checkpoint_save_start", state)
            with self.core.checkpoint.store_path(metadata) as (path, uuid):
                torch.save(state, path / STATE_FILE)
                (path / "load_data.json").write_text(json.dumps(self._load_data()))
                self._call("on_checkpoint_write_end", str(path))
                self._call("on_checkpoint_end", str(path))
            self._call("on_checkpoint_upload_end", uuid)
            self._say(f"checkpoint {uuid} at batch {self.batches}")
        self.dist.broadcast(None)  # everyone waits for the chief's checkpoint

    def _load_data(self) -> dict[str, Any]:
        """What `pytorch.load_trial_from_checkpoint_path` reads back (Determined's keys)."""
        cls = type(self.trial)
        return {"trial_type": "PyTorchTrial", "batches_trained": self.batches,
                "trial_cls_spec": f"{cls.__module__}:{cls.__qualname__}",
                "hparams": self.context.get_hparams(),
                "experiment_config": self.context.get_experiment_config(),
                "is_trainer": not self.options.use_cluster_checkpoint,
                "trial_in_main": cls.__module__ == "__main__"}

    def _latest(self) -> str | None:
        if self.options.latest_checkpoint or not self.options.use_cluster_checkpoint:
            return self.options.latest_checkpoint
        return self.core.info.latest_checkpoint if self.core.info else None

    def _restore(self) -> None:
        latest = self._latest()
        if not latest:
            return
        with self.core.checkpoint.restore_path(latest) as path:
            state = torch.load(Path(path) / STATE_FILE, map_location=self.context.device,
                               weights_only=False)
        self._call("on_checkpoint_load_start", state)
        _load_state(self.context, state, latest)
        for name, sd in (state.get("callbacks") or {}).items():
            if name in self.callbacks:
                self.callbacks[name].load_state_dict(sd)
        self.batches = self.last_val = self.last_ckpt = int(state["batches_trained"])
        self.context._initial_batch = self.context._batches_trained = self.batches
        rng = state.get("rng_state") or {}
        if "cpu" in rng and self.dist.size == 1:
            torch.set_rng_state(rng["cpu"])
            np.random.set_state(rng["numpy"])
            random.setstate(rng["random"])
        self._say(f"resumed from checkpoint {latest} at batch {self.batches}")

    def _say(self, text: str) -> None:
        if self.dist.is_chief:
            print(text, flush=True)


def _load_state(ctx: PyTorchTrialContext, state: dict[str, Any], uuid: str) -> None:
    models, opts = state["models_state_dict"], state["optimizers_state_dict"]
    if len(models) != len(ctx.models) or len(opts) != len(ctx.optimizers):
        raise RuntimeError(f"checkpoint {uuid} holds {len(models)} model(s) and "
                           f"{len(opts)} optimizer(s); the trial wrapped "
                           f"{len(ctx.models)} and {len(ctx.optimizers)}")
    for model, sd in zip(ctx.models, models, strict=True):
        _unwrap(model).load_state_dict(sd)
    for opt, sd in zip(ctx.optimizers, opts, strict=True):
        opt.load_state_dict(sd)
    for sched, sd in zip(ctx.lr_schedulers, state["lr_schedulers_state_dict"], strict=False):
        sched.load_state_dict(sd)
    if ctx._scaler is not None and "scaler_state_dict" in state:
        ctx._scaler.load_state_dict(state["scaler_state_dict"])


def _reduced(rows: list[tuple[dict[str, Any], int]],
             how: _reducer.Reducer | dict[str, _reducer.Reducer]) -> dict[str, Any]:
    """Validation metrics of every batch of every rank, reduced per metric."""
    if how is _reducer.Reducer.AVG and not isinstance(how, dict):
        return _mean(rows)
    out = _mean(rows)
    for key in out:
        reducer = how.get(key, _reducer.Reducer.AVG) if isinstance(how, dict) else how
        values = [(float(m[key]), w) for m, w in rows
                  if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool)]
        if values and reducer is not _reducer.Reducer.AVG:
            out[key] = _reducer.reduce_values(reducer, values)
    return out


class _FitOperation:
    """`Trainer.fit(max_length=...)`: one length, progress reported as a fraction."""

    def __init__(self, ctx: core.Context, length: dict[str, int]) -> None:
        self.core = ctx
        self.unit, self.length = next(iter(length.items()))

    def report_progress(self, length: float) -> None:
        if self.core.distributed.is_chief and self.length:
            self.core.train.report_progress(min(1.0, max(0.0, length / self.length)))

    def report_completed(self, searcher_metric: Any = None) -> None:
        log.debug("fit done: %s", searcher_metric)


class _LocalOperation:
    """Off a cluster: one operation of searcher.max_length, progress only logged."""

    def __init__(self, length: int) -> None:
        self.length = length

    def report_progress(self, length: float) -> None:
        log.debug("progress %.1f of %d", length, self.length)

    def report_completed(self, searcher_metric: Any = None) -> None:
        log.info("searcher operation done: %s", searcher_metric)


def _op_length(op: Any, config: dict[str, Any]) -> Any:
    if isinstance(op, _FitOperation):
        return {op.unit: op.length}
    raw = configured_length(config)
    if isinstance(raw, dict):
        return {next(iter(raw)): op.length}
    return int(op.length)


def _in_units(batches: int, op: Any, config: dict[str, Any], units: Units) -> float:
    """`batches` expressed in the unit of op.length, for progress."""
    total = units.batches(_op_length(op, config), "max_length")
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
