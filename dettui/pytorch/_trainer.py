"""Determined's Trainer API: `pytorch.init()` gives a PyTorchTrialContext, `Trainer(trial,
context).fit(...)` trains it with dettui's loop (`_controller.Controller`).

    with det.pytorch.init() as train_context:
        trial = MyTrial(train_context)
        det.pytorch.Trainer(trial, train_context).fit(
            max_length=det.pytorch.Epoch(1), latest_checkpoint=info.latest_checkpoint)

As in Determined 0.38.1: on a cluster the config and distributed setup come from the
allocation (the hyperparameters too, when `init` is not given them); `fit`'s periods are what
it is given (never validate or checkpoint in between by default), its length `max_length`
(on a cluster, the deprecated `searcher.max_length` if not given); it resumes only from the
`latest_checkpoint` it is given. `hyperparameters.global_batch_size` is needed only to read
`context.get_global_batch_size()` or to turn records into batches.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

from dettui import core
from dettui.core._searcher import configured_length
from dettui.pytorch._controller import (
    NEVER,
    Controller,
    FitOptions,
    _device,
    _seed_everything,
)
from dettui.pytorch._trial import PyTorchTrial, PyTorchTrialContext
from dettui.pytorch._units import Batch, Epoch, TrainUnit

log = logging.getLogger("dettui.pytorch")


@contextlib.contextmanager
def init(*, hparams: dict[str, Any] | None = None, exp_conf: dict[str, Any] | None = None,
         distributed: core.DistributedContext | None = None, aggregation_frequency: int = 1,
         enable_tensorboard_logging: bool = True) -> Iterator[PyTorchTrialContext]:
    """A PyTorchTrialContext inside `core.init()`; every Trainer call belongs in its scope."""
    info = core.get_cluster_info()
    if aggregation_frequency != 1:
        log.warning("aggregation_frequency %d: dettui exchanges gradients every batch",
                    aggregation_frequency)
    group = False
    if info is not None:
        hparams = info.trial.hparams if hparams is None else hparams
        exp_conf = info.trial.config
        _seed_everything(info.trial.trial_seed)
        if distributed is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            import torch
            import torch.distributed as dist

            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
            group = True
            distributed = core.DistributedContext.from_torch_distributed()
    try:
        # MANUAL, as Determined's: the loop writes its metrics to TensorBoard itself
        with core.init(distributed=distributed,
                       tensorboard_mode=core.TensorboardMode.MANUAL) as core_context:
            context = PyTorchTrialContext(
                core_context, dict(hparams) if hparams is not None else None,
                dict(exp_conf) if exp_conf is not None else None,
                _device(core_context.distributed))
            if info is not None:
                context._steps_completed = int(info.trial._steps_completed)
            context.set_enable_tensorboard_logging(enable_tensorboard_logging)
            yield context
    finally:
        if group:
            import torch.distributed as dist

            dist.destroy_process_group()


class Trainer:
    """Trains a PyTorchTrial built on a context from `pytorch.init()`."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext | None = None) -> None:
        self._trial = trial
        self._context = context if context is not None else trial.context
        self._info = core.get_cluster_info()
        self._local_training = self._info is None or self._info.task_type != "TRIAL"

    def configure_profiler(self, *args: Any, **kwargs: Any) -> None:
        log.error("`trainer.configure_profiler` has been replaced with "
                  "`fit(..., profiling_enabled=True)` and will be removed in a future release.")

    def fit(self, checkpoint_period: TrainUnit | None = None,
            validation_period: TrainUnit | None = None, max_length: TrainUnit | None = None,
            reporting_period: TrainUnit | None = None, checkpoint_policy: str = "best",
            latest_checkpoint: str | None = None, step_zero_validation: bool = False,
            test_mode: bool = False, profiling_enabled: bool = False) -> None:
        """Train to `max_length` (on a cluster, the legacy `searcher.max_length` if not given),
        validating and checkpointing every `validation_period`/`checkpoint_period` (never by
        default), reporting every `reporting_period` (100 batches), resuming from
        `latest_checkpoint` (give it `det.get_cluster_info().latest_checkpoint`)."""
        if checkpoint_policy not in ("best", "all", "none"):
            raise ValueError(f"checkpoint_policy must be 'best', 'all' or 'none', not "
                             f"{checkpoint_policy!r}")
        for what, unit in (("checkpoint_period", checkpoint_period),
                           ("validation_period", validation_period),
                           ("reporting_period", reporting_period)):
            if unit is not None and not isinstance(unit, (Batch, Epoch)):
                raise TypeError(f"{what} must be a det.pytorch.Batch or det.pytorch.Epoch, "
                                f"not {type(unit).__name__}")
        metric, smaller, steps = None, True, 0
        if self._local_training:
            if checkpoint_policy == "best":
                log.warning("checkpoint_policy='best' is not supported in local training mode. "
                            "Falling back to 'all'.")
                checkpoint_policy = "all"
            if max_length is None:
                raise ValueError("max_length must be defined in local training mode.")
            if profiling_enabled:
                log.warning("Profiling is not supported in local training mode.")
        else:
            if test_mode:
                raise ValueError("test_mode is only supported in local training mode.")
            info = self._info
            assert info is not None
            if latest_checkpoint is None and info.latest_checkpoint is not None:
                log.warning("latest_checkpoint has not been configured. Pause/resume training "
                            "will not be able to continue from latest checkpoint. Did you mean "
                            "to set `fit(latest_checkpoint=info.latest_checkpoint)'?")
            searcher = info.trial.config.get("searcher") or {}
            metric = searcher.get("metric")
            smaller = bool(searcher.get("smaller_is_better", True))
            steps = int(info.trial._steps_completed)
            if max_length is None:
                max_length = _legacy_max_length(info.trial.config, info.trial.hparams)
            _check_searcher_length(info.trial.config, max_length)
        if not isinstance(max_length, (Batch, Epoch)) or isinstance(max_length.value, bool) \
                or not isinstance(max_length.value, int):
            raise TypeError("max_length must either be a det.pytorch.Batch(int) or "
                            "det.pytorch.Epoch(int) type.")
        options = FitOptions(
            max_length=max_length, validation_period=validation_period or NEVER,
            checkpoint_period=checkpoint_period or NEVER,
            reporting_period=reporting_period or Batch(100), checkpoint_policy=checkpoint_policy,
            latest_checkpoint=latest_checkpoint, step_zero_validation=step_zero_validation,
            test_mode=test_mode, local_training=self._local_training, searcher_metric=metric,
            smaller_is_better=smaller, steps_completed=steps,
            profiling_enabled=profiling_enabled and not self._local_training)
        Controller(self._trial, self._context, options).run()


def _legacy_max_length(config: dict[str, Any], hparams: dict[str, Any]) -> TrainUnit:
    """`searcher.max_length` (deprecated in 0.38.0), else `max_time` in its `time_metric`."""
    raw = configured_length(config)
    if raw is None:
        raise ValueError("`fit(max_length=X)` must be set with your desired training length.")
    warnings.warn("Configuring `max_length` from the `searcher.max_length` experiment config, "
                  "which was deprecated in 0.38.0 and will be removed in a future release. "
                  "Please set `fit(max_length=X)` with your desired training length directly.",
                  FutureWarning, stacklevel=3)
    unit, value = next(iter(raw.items())) if isinstance(raw, dict) else ("batches", raw)
    gbs = hparams.get("global_batch_size")
    return TrainUnit._from_searcher_unit(int(value), unit, int(gbs) if gbs else None)


def _check_searcher_length(config: dict[str, Any], max_length: TrainUnit) -> None:
    """ASHA's `max_time`/`time_metric` and `max_length` should agree: a warning if not."""
    searcher = config.get("searcher") or {}
    time_metric = searcher.get("time_metric")
    if time_metric is None:
        return
    max_time = searcher.get("max_time")
    want = {"batches": Batch, "epochs": Epoch}.get(time_metric)
    if want is None:
        log.warning("`searcher.time_metric` must be either 'batches' or 'epochs' for training "
                    "with PyTorchTrials, but got %s. Training will proceed with %s but may "
                    "result in unexpected behavior.", time_metric, max_length)
    elif not isinstance(max_length, want) or max_length.value != max_time:
        log.warning("`max_length` passed into `fit()` method (%s) does not match "
                    "`searcher.max_time` and `searcher.time_metric` from the experiment config "
                    "(%s). This may result in unexpected hyperparameter search behavior.",
                    max_length, want(max_time))
