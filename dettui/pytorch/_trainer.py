"""Determined's Trainer API: `pytorch.init()` gives a PyTorchTrialContext, `Trainer(trial,
context).fit(...)` trains it with dettui's loop (`_controller.Controller`).

    with det.pytorch.init() as train_context:
        trial = MyTrial(train_context)
        det.pytorch.Trainer(trial, train_context).fit(
            max_length=det.pytorch.Epoch(1), latest_checkpoint=info.latest_checkpoint)

On a cluster the hyperparameters, config and distributed setup come from the allocation;
`fit`'s periods default to the config's `min_validation_period`/`min_checkpoint_period`, its
length to `searcher.max_length`. Like Determined, `fit` resumes only from the
`latest_checkpoint` it is given.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Container, Iterator
from typing import Any

from dettui import core
from dettui.pytorch._controller import Controller, FitOptions, _device, _seed_everything
from dettui.pytorch._trial import PyTorchTrial, PyTorchTrialContext

log = logging.getLogger("dettui.pytorch")


class TrainUnit:
    """A length in batches or epochs: an int, or a container of step counts (for periods)."""

    unit = ""

    def __init__(self, value: int | Container[int]) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self.value!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.unit, repr(self.value)))

    def length(self) -> dict[str, Any]:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            values = frozenset(int(v) for v in self.value)  # type: ignore[attr-defined]
            return {self.unit: values}
        return {self.unit: int(self.value)}


class Batch(TrainUnit):
    unit = "batches"


class Epoch(TrainUnit):
    unit = "epochs"


def _length(unit: TrainUnit | None, what: str, periods: bool = False) -> Any:
    if unit is None:
        return None
    if not isinstance(unit, TrainUnit):
        raise TypeError(f"{what} must be a pytorch.Batch or pytorch.Epoch, not "
                        f"{type(unit).__name__}")
    length = unit.length()
    if not periods and not isinstance(next(iter(length.values())), int):
        raise TypeError(f"{what} must be a pytorch.Batch(int) or pytorch.Epoch(int)")
    return length


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
        with core.init(distributed=distributed) as core_context:
            context = PyTorchTrialContext(core_context, dict(hparams or {}), dict(exp_conf or {}),
                                          _device(core_context.distributed))
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

    def fit(self, checkpoint_period: TrainUnit | None = None,
            validation_period: TrainUnit | None = None, max_length: TrainUnit | None = None,
            reporting_period: TrainUnit | None = None, checkpoint_policy: str = "best",
            latest_checkpoint: str | None = None, step_zero_validation: bool = False,
            test_mode: bool = False, profiling_enabled: bool = False) -> None:
        ctx = self._context
        config = ctx.get_experiment_config()
        length = _length(max_length, "max_length")
        if length is None and ctx._core.info is None:
            raise ValueError("`fit(max_length=X)` must be set with your desired training "
                             "length.")
        if test_mode or profiling_enabled or checkpoint_policy != "best":
            log.info("fit: test_mode, profiling_enabled and checkpoint_policy are accepted "
                     "and not used by dettui")
        reporting = _length(reporting_period or Batch(100), "reporting_period")
        options = FitOptions(
            max_length=length,
            validation_period=_length(validation_period, "validation_period", periods=True),
            checkpoint_period=_length(checkpoint_period, "checkpoint_period", periods=True),
            reporting_period=reporting, latest_checkpoint=latest_checkpoint,
            use_cluster_checkpoint=False, step_zero_validation=step_zero_validation)
        Controller(self._trial, ctx, ctx._core, config, options).run()
