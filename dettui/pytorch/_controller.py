"""The training loop of a PyTorchTrial, as Determined 0.38.1's `_PyTorchTrialController`.

Lengths and periods are `Batch`/`Epoch` units; an epoch is the training data loader's length
(the chief's). Training runs to `max_length`, stopping at each boundary (validation,
checkpoint and reporting periods, the end): training metrics are reported, progress too at a
reporting or final boundary, then the validation or checkpoint that is due, then preemption
and `set_stop_requested` are checked (checkpoint and exit). After each validation the
checkpoint policy decides (`best`: better than the experiment's best so far; `all`; `none`).
At the end the last batch is validated and checkpointed if it was not. Checkpoints hold
Determined's files (`state_dict.pth`, `trial_state.pkl`, `load_data.json`, `code/`), and a
resume from one of the same trial continues at its batch, epoch and data position.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import pickle
import random
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dettui import core
from dettui.pytorch import _reducer
from dettui.pytorch._callback import PyTorchCallback
from dettui.pytorch._code import write_user_code
from dettui.pytorch._data import as_loader
from dettui.pytorch._tensorboard import MetricLog
from dettui.pytorch._trial import LRScheduler, PyTorchTrial, PyTorchTrialContext
from dettui.pytorch._units import (
    Batch,
    Epoch,
    TrainUnit,
    _as_metrics,
    _batch_len,
    _mean,
    accepts,
)

__all__ = ["Controller", "FitOptions", "_mean"]
log = logging.getLogger("dettui.pytorch")
STATE_FILE = "state_dict.pth"
TRIAL_STATE_FILE = "trial_state.pkl"
NEVER = Batch(sys.maxsize)


@dataclass(frozen=True)
class FitOptions:
    """What `Trainer.fit` settled: lengths as TrainUnits, the policy, where to resume from."""

    max_length: TrainUnit
    validation_period: TrainUnit = NEVER
    checkpoint_period: TrainUnit = NEVER
    reporting_period: TrainUnit = field(default_factory=lambda: Batch(100))
    checkpoint_policy: str = "all"
    latest_checkpoint: str | None = None
    step_zero_validation: bool = False
    test_mode: bool = False
    local_training: bool = True
    searcher_metric: str | None = None
    smaller_is_better: bool = True
    steps_completed: int = 0
    profiling_enabled: bool = False


@dataclass
class TrialState:
    """Determined's `_TrialState`, pickled as a dict into `trial_state.pkl`."""

    trial_id: int = 0
    last_ckpt: int = 0
    step_id: int = 0
    last_val: int = 0
    batches_trained: int = 0
    epochs_trained: int = 0


class ShouldExit(Exception):
    """Preempted or asked to stop: checkpoint what is unsaved and return."""


@dataclass
class Boundary:
    kind: str  # train, validate, checkpoint, report
    unit: TrainUnit
    reached: bool = False


class Controller:
    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext,
                 options: FitOptions) -> None:
        self.trial, self.context, self.options = trial, context, options
        self.core: core.Context = context._core
        self.dist = self.core.distributed
        self.is_chief = self.dist.rank == 0
        self.trial_id = 0 if options.local_training or self.core.info is None \
            else self.core.info.trial.trial_id
        self.callbacks: dict[str, PyTorchCallback] = dict(trial.build_callbacks() or {})
        for callback in self.callbacks.values():
            if _overridden(callback, "on_checkpoint_end", PyTorchCallback):
                warnings.warn("The on_checkpoint_end callback is deprecated, please use "
                              "on_checkpoint_write_end instead.", FutureWarning, stacklevel=2)
        if not context.models:
            raise ValueError("Must have at least one model. This might be caused by not "
                             "wrapping your model with wrap_model().")
        if not context.optimizers:
            raise ValueError("Must have at least one optimizer. This might be caused by not "
                             "wrapping your optimizer with wrap_optimizer().")
        self.batch_defined = _overridden(trial, "evaluate_batch")
        if self.batch_defined == _overridden(trial, "evaluate_full_dataset"):
            raise ValueError("Please define exactly one of: `evaluate_batch()` or "
                             "`evaluate_full_dataset()`. For most use cases `evaluate_batch()` "
                             "is recommended because it can be parallelized across all "
                             "devices.")
        self.state = TrialState(trial_id=self.trial_id)
        self.tensorboard = MetricLog(context)
        self.seed = self.core.info.trial.trial_seed if self.core.info else 0

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> None:
        with contextlib.ExitStack() as stack:
            for callback in self.callbacks.values():
                callback.on_trial_startup(self.options.steps_completed,
                                          self.options.latest_checkpoint)
                stack.callback(callback.on_trial_shutdown)
            self._set_data_loaders()
            if self.options.latest_checkpoint is not None:
                self._restore(self.options.latest_checkpoint)
            self.batches = self._enumerate(self.state.batches_trained)
            for callback in self.callbacks.values():
                callback.on_training_start()
            if self.options.profiling_enabled:
                self.core.profiler.on()
            self._run()

    def _run(self) -> None:
        opts = self.options
        try:
            if opts.step_zero_validation and self.state.batches_trained == 0:
                self._validate()
            self._train(Batch(1) if opts.test_mode else opts.max_length, [
                Boundary("train", opts.max_length),
                Boundary("validate", opts.validation_period),
                Boundary("checkpoint", opts.checkpoint_period),
                Boundary("report", opts.reporting_period)])
        except ShouldExit:
            if self.state.last_ckpt != self.state.batches_trained:
                self._checkpoint()
            self._say(f"stopped at batch {self.state.batches_trained}: checkpointed, exiting")
        except core.InvalidHP:
            if self.state.last_ckpt != self.state.batches_trained:
                self._checkpoint()
            raise

    def _set_data_loaders(self) -> None:
        rank, size = self.dist.rank, self.dist.size
        self.train_loader = as_loader(self.trial.build_training_data_loader(), rank, size,
                                      self.seed, "build_training_data_loader")
        if len(self.train_loader) == 0:
            raise ValueError(f"the training data loader is empty for rank {rank}")
        self.epoch_len = int(self.dist.broadcast(len(self.train_loader)))
        self.context._epoch_len = self.epoch_len
        self.val_loader = as_loader(self.trial.build_validation_data_loader(),
                                    rank if self.batch_defined else 0,
                                    size if self.batch_defined else 1, self.seed,
                                    "build_validation_data_loader")

    def _enumerate(self, start: int) -> Iterator[tuple[int, Any]]:
        """(global batch index, batch) from `start` on, epoch after epoch."""
        index = start
        epoch, offset = divmod(start, self.epoch_len)
        while True:
            for batch in self.train_loader.batches(epoch, offset):
                yield index, batch
                index += 1
            epoch, offset = epoch + 1, 0

    def _train(self, length: TrainUnit, boundaries: list[Boundary]) -> None:
        while self._steps_until_complete(length) > 0:
            metrics = self._train_with_boundaries(boundaries)
            avg = self._report_training(metrics)
            for callback in self.callbacks.values():
                callback.on_training_workload_end(avg_metrics=avg, batch_metrics=metrics)
            progress_reported = False
            for boundary in boundaries:
                if not boundary.reached:
                    continue
                boundary.reached = False
                if boundary.kind in ("train", "report"):
                    if self.is_chief and not progress_reported:
                        self._report_progress()
                        progress_reported = True
                elif boundary.kind == "validate":
                    if self.state.last_val != self.state.batches_trained:
                        self._validate()
                elif self.state.last_ckpt != self.state.batches_trained:
                    self._checkpoint()
                self._stop_requested()
        if self.state.last_val != self.state.batches_trained:
            self._validate()
        if self.state.last_ckpt != self.state.batches_trained:
            self._checkpoint()
        self._say(f"training done after {self.state.batches_trained} batches")

    def _steps_until_complete(self, unit: TrainUnit) -> int:
        done = (self.state.batches_trained if isinstance(unit, Batch)
                else self.state.epochs_trained)
        return int(unit.value) - done  # type: ignore[call-overload]

    def _train_with_boundaries(self, boundaries: list[Boundary]) -> list[dict[str, Any]]:
        if self.is_chief:
            self.core.train.set_status("training")
        for model in self.context.models:
            model.train()
        _reset_reducers(self.context)
        metrics: list[dict[str, Any]] = []
        for batch_idx, batch in self.batches:
            epoch_idx, in_epoch = divmod(batch_idx, self.epoch_len)
            self.context._current_batch_idx = batch_idx
            if in_epoch == 0:
                self._on_epoch_start(epoch_idx)
            metrics.append(self._train_batch(batch, epoch_idx, batch_idx))
            self.state.batches_trained += 1
            epoch_end = in_epoch == self.epoch_len - 1
            if epoch_end:
                for callback in self.callbacks.values():
                    callback.on_training_epoch_end(epoch_idx)
                self.state.epochs_trained += 1
            for b in boundaries:
                if isinstance(b.unit, Epoch):
                    b.reached = b.reached or (epoch_end and b.unit.should_stop(epoch_idx + 1))
                else:
                    b.reached = b.reached or b.unit.should_stop(batch_idx + 1)
                if b.kind == "train" and self.options.test_mode:
                    b.reached = True
            if any(b.reached for b in boundaries):
                break
        return metrics

    def _on_epoch_start(self, epoch_idx: int) -> None:
        for callback in self.callbacks.values():
            if inspect.signature(callback.on_training_epoch_start).parameters:
                callback.on_training_epoch_start(epoch_idx)
            else:
                log.warning("on_training_epoch_start() without parameters is deprecated since "
                            "0.17.8. Please add epoch_idx parameter.")
                callback.on_training_epoch_start()  # type: ignore[call-arg]

    def _train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        ctx = self.context
        batch = ctx.to_device(batch)
        kwargs = {}
        if accepts(self.trial.train_batch, "epoch_idx", 2):
            kwargs["epoch_idx"] = epoch_idx
        if accepts(self.trial.train_batch, "batch_idx", 3):
            kwargs["batch_idx"] = batch_idx
        out = self.trial.train_batch(batch, **kwargs)
        if ctx._scaler is not None:
            ctx._scaler.update()
        epoch_end = (batch_idx % self.epoch_len) == self.epoch_len - 1
        for sched in ctx.lr_schedulers:
            mode = sched.step_mode
            if mode is LRScheduler.StepMode.STEP_EVERY_BATCH or (
                    mode is LRScheduler.StepMode.STEP_EVERY_EPOCH and epoch_end):
                sched.step()
        return _as_metrics(out, "train_batch")

    def _stop_requested(self) -> None:
        stop = bool(self.dist.broadcast(self.context.get_stop_requested()
                                        if self.is_chief else None))
        if stop or self.core.preempt.should_preempt():
            raise ShouldExit()

    def _report_progress(self) -> None:
        unit = self.options.max_length
        done = (self.state.batches_trained if isinstance(unit, Batch)
                else self.state.epochs_trained)
        self.core.train.report_progress(done / int(unit.value))  # type: ignore[call-overload]

    # -- metrics ----------------------------------------------------------------------------

    def _report_training(self, batch_metrics: list[dict[str, Any]]) -> dict[str, Any]:
        rows = self.dist.allgather((_mean([(m, 1) for m in batch_metrics]), len(batch_metrics)))
        avg = _mean([r for r in rows if r[1]])
        avg.update(_reducer.reduce_wrapped(self.context.reducers, self.dist.allgather,
                                           self.is_chief, training=True))
        avg = self.dist.broadcast(avg if self.is_chief else None)
        if self.is_chief:
            self.tensorboard.write("train", self.state.batches_trained, avg, batch_metrics)
            reported = dict(avg)
            reported.setdefault("batches", self.state.batches_trained)
            reported.setdefault("epochs", self.state.epochs_trained)
            self.core.train.report_training_metrics(
                steps_completed=self.state.batches_trained, metrics=reported)
        return dict(avg)

    def _validate(self) -> dict[str, Any]:
        if self.is_chief:
            self.core.train.set_status("validating")
        _reset_reducers(self.context)
        for model in self.context.models:
            model.eval()
        for callback in self.callbacks.values():
            callback.on_validation_start()
        with torch.no_grad():
            metrics = self._batches_metrics() if self.batch_defined else self._full_dataset()
            metrics.update(_reducer.reduce_wrapped(self.context.reducers, self.dist.allgather,
                                                   self.is_chief, training=False))
        for model in self.context.models:
            model.train()
        if self.dist.size > 1 and any(_overridden(c, "on_validation_end", PyTorchCallback)
                                      for c in self.callbacks.values()):
            metrics = self.dist.broadcast(metrics if self.is_chief else None)
        for callback in self.callbacks.values():
            callback.on_validation_end(metrics)
        self.state.last_val = self.state.batches_trained
        should_checkpoint = False
        if self.is_chief:
            self.tensorboard.write("val", self.state.batches_trained, metrics)
            best_before = self.core.train.get_experiment_best_validation()
            metrics.setdefault("batches", self.state.batches_trained)
            metrics.setdefault("epochs", self.state.epochs_trained)
            self.core.train.report_validation_metrics(
                steps_completed=self.state.batches_trained, metrics=metrics)
            shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in sorted(metrics.items()))
            self._say(f"validation at batch {self.state.batches_trained}: {shown}")
            should_checkpoint = self._checkpoint_after(metrics, best_before)
        if self.dist.broadcast(should_checkpoint if self.is_chief else None):
            self._checkpoint()
        return metrics

    def _checkpoint_after(self, metrics: dict[str, Any], best_before: float | None) -> bool:
        """The checkpoint policy's answer after a validation (on the chief)."""
        if self.state.last_ckpt == self.state.batches_trained:
            return False
        policy = self.options.checkpoint_policy
        if policy == "all":
            return True
        if policy != "best":
            return False
        name = self.options.searcher_metric
        if name not in metrics:
            raise RuntimeError(
                f"Search method is configured to use metric '{name}' but model definition "
                f"returned validation metrics {list(metrics)}. The metric used by the search "
                "method must be one of the validation metrics returned by the model definition.")
        value = metrics[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RuntimeError(f"Searcher validation metric '{name}' returned a non-scalar "
                               f"value: {value}.")
        if best_before is None:
            return True
        return value < best_before if self.options.smaller_is_better else value > best_before

    def _full_dataset(self) -> dict[str, Any]:
        metrics = None
        if self.is_chief:
            val = self.val_loader
            loader = val.torch_loader() if hasattr(val, "torch_loader") else val.loader
            metrics = _as_metrics(self.trial.evaluate_full_dataset(loader),
                                  "evaluate_full_dataset")
        return dict(self.dist.broadcast(metrics) or {})

    def _batches_metrics(self) -> dict[str, Any]:
        for callback in self.callbacks.values():
            callback.on_validation_epoch_start()
        with_idx = accepts(self.trial.evaluate_batch, "batch_idx", 2)
        rows, outputs = [], []
        for i, batch in enumerate(self.val_loader.batches(0)):
            batch = self.context.to_device(batch)
            out = (self.trial.evaluate_batch(batch, batch_idx=i) if with_idx
                   else self.trial.evaluate_batch(batch))
            metrics = _as_metrics(out, "evaluate_batch")
            outputs.append(metrics)
            rows.append((metrics, _batch_len(batch)))
            if self.options.test_mode:
                break
        for callback in self.callbacks.values():
            callback.on_validation_epoch_end(outputs)
        all_rows = [r for part in self.dist.allgather(rows) for r in part]
        if not all_rows:
            raise RuntimeError("validation_loader is empty.")
        return _reduced(all_rows, self.trial.evaluation_reducer())

    # -- checkpoints ------------------------------------------------------------------------

    def _checkpoint(self) -> None:
        if self.is_chief:
            self.core.train.set_status("checkpointing")
        self.state.last_ckpt = self.state.batches_trained
        uuid = ""
        if self.is_chief:
            metadata = {"steps_completed": self.state.batches_trained,
                        "framework": f"torch-{torch.__version__}", "format": "pickle"}
            with self.core.checkpoint.store_path(metadata) as (path, storage_id):
                self._save(Path(path))
                uuid = storage_id
            self._say(f"checkpoint {uuid} at batch {self.state.batches_trained}")
        uuid = self.dist.broadcast(uuid if self.is_chief else None)
        for callback in self.callbacks.values():
            callback.on_checkpoint_upload_end(uuid=uuid)

    def _save(self, path: Path) -> None:
        write_user_code(path, self.core)
        ctx = self.context
        state: dict[str, Any] = {
            "models_state_dict": [_unwrap(m).state_dict() for m in ctx.models],
            "optimizers_state_dict": [o.state_dict() for o in ctx.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in ctx.lr_schedulers],
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
            "rng_state": _rng_state(),
        }
        if ctx._scaler is not None:
            state["scaler_state_dict"] = ctx._scaler.state_dict()
        for callback in self.callbacks.values():
            callback.on_checkpoint_save_start(state)
        torch.save(state, path / STATE_FILE)
        with (path / TRIAL_STATE_FILE).open("wb") as f:
            pickle.dump(vars(self.state), f)
        (path / "load_data.json").write_text(json.dumps(self._load_data()))
        for callback in self.callbacks.values():
            callback.on_checkpoint_end(str(path))
            callback.on_checkpoint_write_end(str(path))

    def _load_data(self) -> dict[str, Any]:
        """What `pytorch.load_trial_from_checkpoint_path` reads back (Determined's keys). A
        trial class of the entrypoint script is named by the script's module name."""
        cls = type(self.trial)
        module, in_main = cls.__module__, cls.__module__ == "__main__"
        if in_main:
            main_file = getattr(sys.modules["__main__"], "__file__", None) or ""
            module = Path(main_file).stem if main_file.endswith(".py") else ""
        data: dict[str, Any] = {
            "trial_type": "PyTorchTrial",
            "experiment_config": self.context._config_or_none(),
            "hparams": self.context._hparams_or_none(),
            "trial_cls_spec": f"{module}:{cls.__qualname__}",
            "is_trainer": True,
        }
        if in_main:
            data["trial_in_main"] = True
        if self.context._is_pre_trainer:
            data.pop("is_trainer")
        return data

    def _restore(self, storage_id: str) -> None:
        log.info("Restoring trial from checkpoint %s", storage_id)
        with self.core.checkpoint.restore_path(storage_id) as path:
            state = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
            trial_state = Path(path) / TRIAL_STATE_FILE
            saved = pickle.loads(trial_state.read_bytes()) if trial_state.is_file() else None
        for callback in self.callbacks.values():
            callback.on_checkpoint_load_start(state)
        _load_state(self.context, state, storage_id)
        _set_rng_state(state.get("rng_state"))
        for name, callback in self.callbacks.items():
            if name in (state.get("callbacks") or {}):
                callback.load_state_dict(state["callbacks"][name])
            elif _overridden(callback, "load_state_dict", PyTorchCallback):
                log.warning("Callback '%s' implements load_state_dict(), but no callback state "
                            "was found for that name when restoring from checkpoint. This "
                            "callback will be initialized from scratch.", name)
        if saved is None and "batches_trained" in state:  # dettui's checkpoints before 0.38
            batches = int(state["batches_trained"])
            saved = {"trial_id": self.trial_id, "last_ckpt": batches, "last_val": batches,
                     "batches_trained": batches, "epochs_trained": batches // self.epoch_len}
        if saved is not None and saved.get("trial_id") == self.trial_id:
            self.state = TrialState(**{k: int(v) for k, v in saved.items()
                                       if k in TrialState.__dataclass_fields__})
        self._say(f"resumed from checkpoint {storage_id} at batch {self.state.batches_trained}")

    def _say(self, text: str) -> None:
        if self.is_chief:
            print(text, flush=True)


def _overridden(obj: Any, name: str, base: type = PyTorchTrial) -> bool:
    return getattr(type(obj), name, None) is not getattr(base, name, None)


def _reset_reducers(ctx: PyTorchTrialContext) -> None:
    for wrapped in ctx.reducers:
        wrapped.reducer.reset()


def _rng_state() -> dict[str, Any]:
    """Determined's keys; numpy's key as a tensor, so `torch.load`'s default `weights_only`
    reads the checkpoint (numpy's `set_state` takes it back as it is)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    np_state = (kind, torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss),
                float(cached))
    state = {"cpu_rng_state": torch.random.get_rng_state(),
             "np_rng_state": np_state, "random_rng_state": random.getstate()}
    if torch.cuda.device_count():
        state["gpu_rng_state"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(rng: dict[str, Any] | None) -> None:
    if not rng:
        log.warning("The checkpoint has no random state to restore.")
        return
    if "cpu_rng_state" not in rng and "cpu" in rng:  # dettui's keys before 0.38
        rng = {"cpu_rng_state": rng["cpu"], "np_rng_state": rng["numpy"],
               "random_rng_state": rng["random"]}
    np.random.set_state(rng["np_rng_state"])
    random.setstate(rng["random_rng_state"])
    torch.random.set_rng_state(rng["cpu_rng_state"])
    if torch.cuda.device_count() and "gpu_rng_state" in rng:
        torch.cuda.set_rng_state(rng["gpu_rng_state"])


def _load_state(ctx: PyTorchTrialContext, state: dict[str, Any], uuid: str) -> None:
    models, opts = state["models_state_dict"], state["optimizers_state_dict"]
    if len(models) != len(ctx.models) or len(opts) != len(ctx.optimizers):
        raise RuntimeError(f"checkpoint {uuid} holds {len(models)} model(s) and "
                           f"{len(opts)} optimizer(s); the trial wrapped "
                           f"{len(ctx.models)} and {len(ctx.optimizers)}")
    for model, sd in zip(ctx.models, models, strict=True):
        sd = dict(sd)
        torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")
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
    out = _mean(rows)
    if how is _reducer.Reducer.AVG:
        return out
    for key in out:
        reducer = how.get(key, _reducer.Reducer.AVG) if isinstance(how, dict) else how
        values = [(float(m[key]), w) for m, w in rows
                  if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool)]
        if values and reducer is not _reducer.Reducer.AVG:
            out[key] = _reducer.reduce_values(reducer, values)
    return out


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
