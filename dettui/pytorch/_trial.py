"""PyTorchTrial and its context, with Determined's names and signatures.

A trial class builds its model, optimizer and data through the context and implements
`train_batch` and `evaluate_batch`; the harness (`dettui.launch.harness`) owns the loop,
validation and checkpoint periods, preemption, resume and DDP.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils import data as torch_data

from dettui import core
from dettui.pytorch import _reducer
from dettui.pytorch._callback import PyTorchCallback
from dettui.pytorch._data import DataLoader, TorchData, to_device

log = logging.getLogger("dettui.pytorch")
Metrics = dict[str, Any]


class LRScheduler:
    """A torch LR scheduler and when the harness steps it."""

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: StepMode) -> None:
        self.scheduler = scheduler
        self.step_mode = step_mode

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)


class PyTorchTrialContext:
    """What a trial sees: hyperparameters, batch sizes, distributed info, and the wrappers."""

    def __init__(self, core_context: core.Context, hparams: dict[str, Any] | None,
                 config: dict[str, Any] | None, device: torch.device | None = None) -> None:
        self._core = core_context
        self.distributed = core_context.distributed
        self._hparams = hparams
        self._config = config
        self.device = device or torch.device("cpu")
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self.reducers: list[_reducer.Wrapped] = []
        self._scaler: Any = None
        self._to_device_warned: set[type] = set()
        self._global_batch_size = self._batch_size()
        self._current_batch_idx: int | None = None
        self._epoch_len: int | None = None
        self._steps_completed = 0
        self._is_pre_trainer = False
        self._tensorboard = True
        self._tensorboard_writer: Any = None

    def _batch_size(self) -> int | None:
        """Determined's: only a trial whose hyperparameters set it has one (checked here)."""
        raw = (self._hparams or {}).get("global_batch_size")
        if not raw:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError("The `global_batch_size` hyperparameter must be an integer value, "
                             f"not {type(raw).__name__}")
        size = raw
        slots = self.distributed.size
        if size < slots:
            raise ValueError(f"hyperparameters.global_batch_size ({size}) is smaller than the "
                             f"number of slots ({slots})")
        if size % slots:
            log.warning("global_batch_size %d is not divisible by %d slots: each slot takes %d, "
                        "the remainder is dropped", size, slots, size // slots)
        return size

    # -- what the trial reads ---------------------------------------------------------------

    def get_hparams(self) -> dict[str, Any]:
        if self._hparams is None:
            raise ValueError("hparams is undefined in this Trial because hparams was not "
                             "configured. Please check the init() call to Trainer API.")
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        hparams = self.get_hparams()
        if name not in hparams:
            raise ValueError(f"hyperparameter '{name}' is not defined; defined: "
                             f"{sorted(hparams)}")
        return hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        if self._config is None:
            raise ValueError("exp_conf is undefined in this Trial. Please check the init() "
                             "call to Trainer API.")
        return dict(self._config)

    def get_data_config(self) -> dict[str, Any]:
        return dict(self.get_experiment_config().get("data") or {})

    def _hparams_or_none(self) -> dict[str, Any] | None:
        return None if self._hparams is None else dict(self._hparams)

    def _config_or_none(self) -> dict[str, Any] | None:
        return None if self._config is None else dict(self._config)

    def _set_is_pre_trainer(self) -> None:
        """Run by the legacy `model_def:Trial` entrypoint (its checkpoints load with its shims)."""
        self._is_pre_trainer = True

    def get_global_batch_size(self) -> int:
        if self._global_batch_size is None:
            raise ValueError("global_batch_size is undefined in this Trial because hparams was "
                             "not configured. Please check the init() call to Trainer API.")
        return self._global_batch_size

    def get_per_slot_batch_size(self) -> int:
        if self._global_batch_size is None:
            raise ValueError("per_slot_batch_size is undefined in this Trial because hparams "
                             "was not configured. Please check the init() call to Trainer API.")
        return self._global_batch_size // self.distributed.size

    def get_trial_id(self) -> int:
        info = self._core.info
        return info.trial.trial_id if info else 0

    def get_experiment_id(self) -> int:
        info = self._core.info
        return info.trial.experiment_id if info else 0

    def get_trial_seed(self) -> int:
        info = self._core.info
        return info.trial.trial_seed if info else 0

    def get_initial_batch(self) -> int:
        """The batch this run of the trial started from (0, or the checkpoint's)."""
        return self._steps_completed

    def current_train_batch(self) -> int:
        """The global index of the batch being (or last) trained."""
        if self._current_batch_idx is None:
            raise RuntimeError("Training hasn't started.")
        return self._current_batch_idx

    def current_train_epoch(self) -> int:
        """The epoch of that batch."""
        return self.current_train_batch() // self._loader_len()

    def _loader_len(self) -> int:
        if self._epoch_len is None:
            raise RuntimeError("Training DataLoader uninitialized.")
        return self._epoch_len

    def get_stop_requested(self) -> bool:
        return bool(getattr(self, "_stop_requested", False))

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the harness to stop after this batch (checkpointed, completed)."""
        self._stop_requested = bool(stop_requested)

    # -- wrappers ---------------------------------------------------------------------------

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Move the model to this slot's device; in a distributed trial, wrap it in DDP."""
        model = model.to(self.device)
        if self.distributed.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
        self.models.append(model)
        return model

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, **_: Any) -> torch.optim.Optimizer:
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler: Any,
                          step_mode: LRScheduler.StepMode) -> Any:
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode))
        return lr_scheduler

    def to_device(self, data: TorchData) -> TorchData:
        return to_device(data, self.device, self._to_device_warned)

    def wrap_reducer(self, reducer: _reducer.MetricReducer | Callable[[list[Any]], Any],
                     name: str | None = None, for_training: bool = True,
                     for_validation: bool = True) -> _reducer.MetricReducer:
        """Reduce values across the batches of each training report and validation, and across
        ranks; the result joins that window's metrics (as `name`, or the dict it returns). A
        function of a list is wrapped: call `.update(value)` on what this returns."""
        wrapped = _reducer.wrap(reducer, name, for_training, for_validation)
        self.reducers.append(wrapped)
        return wrapped.reducer

    def wrap_scaler(self, scaler: Any) -> Any:
        """A `torch.cuda.amp.GradScaler` (or `torch.amp.GradScaler`): pass it to
        `step_optimizer(..., scaler=scaler)`; the harness calls `scaler.update()` after each
        `train_batch` and keeps its state in checkpoints."""
        if self._scaler is not None:
            raise ValueError("wrap_scaler may be called only once")
        self._scaler = scaler
        return scaler

    def autocast_forward_pass(self, to_wrap: nn.Module) -> nn.Module:
        """Run the module's forward pass under `torch.autocast`, its outputs back in float32."""
        forward = to_wrap.forward
        device_type = self.device.type

        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device_type=device_type):
                return _float32(forward(*args, **kwargs))

        to_wrap.forward = autocast_forward  # type: ignore[method-assign]
        return to_wrap

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        self._tensorboard = bool(enable_tensorboard_logging)

    def get_enable_tensorboard_logging(self) -> bool:
        return self._tensorboard

    def get_tensorboard_path(self) -> Path:
        """Where TensorBoard events go: `<storage>/<cluster>/tensorboard/experiment/E/trial/T`
        on a cluster (Determined's layout), a local directory off it."""
        return Path(self._core.train.get_tensorboard_path())

    def get_tensorboard_writer(self) -> Any:
        """A `torch.utils.tensorboard.SummaryWriter` on `get_tensorboard_path()` (needs the
        tensorboard package, as in Determined)."""
        if self._tensorboard_writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ImportError("get_tensorboard_writer needs the tensorboard package: "
                                  "pip install tensorboard") from exc
            self._tensorboard_writer = SummaryWriter(str(self.get_tensorboard_path()))
        return self._tensorboard_writer

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Accepted for Determined's trials; dettui does not run the PyTorch profiler."""
        log.info("context.set_profiler: profiling is not run by dettui")

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Gradients of `loss`; DDP averages them across ranks during this call."""
        loss.backward(**kwargs)

    def step_optimizer(self, optimizer: torch.optim.Optimizer,
                       clip_grads: Callable[[Iterator[nn.Parameter]], None] | None = None,
                       auto_zero_grads: bool = True, scaler: Any = None) -> None:
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads(p for group in optimizer.param_groups for p in group["params"])
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for sched in self.lr_schedulers:
            if sched.step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
                sched.step()

    def is_epoch_start(self) -> bool:
        return self.current_train_batch() % self._loader_len() == 0

    def is_epoch_end(self) -> bool:
        return self.current_train_batch() % self._loader_len() == self._loader_len() - 1


def _float32(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, dict):
        return {k: _float32(v) for k, v in output.items()}
    if isinstance(output, (list, tuple)):
        return type(output)(_float32(v) for v in output)
    return output


class PyTorchTrial:
    """Subclass it, build everything in `__init__(context)`, and implement the batch methods."""

    trial_context_class = PyTorchTrialContext

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context

    def train_batch(self, batch: TorchData, epoch_idx: int,
                    batch_idx: int) -> torch.Tensor | Metrics:
        raise NotImplementedError("a PyTorchTrial must implement train_batch")

    def evaluate_batch(self, batch: TorchData, batch_idx: int) -> Metrics:
        raise NotImplementedError("a PyTorchTrial must implement evaluate_batch "
                                  "(or evaluate_full_dataset)")

    def build_training_data_loader(self) -> DataLoader | torch_data.DataLoader[Any]:
        raise NotImplementedError("a PyTorchTrial must implement build_training_data_loader")

    def build_validation_data_loader(self) -> DataLoader | torch_data.DataLoader[Any]:
        raise NotImplementedError("a PyTorchTrial must implement build_validation_data_loader")

    def evaluate_full_dataset(self, data_loader: Any) -> Metrics | None:
        """Override to validate the whole set at once (chief only) instead of per batch."""
        return None

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Callbacks by name, called at the points of the training loop."""
        return {}

    def evaluation_reducer(self) -> _reducer.Reducer | dict[str, _reducer.Reducer]:
        """How `evaluate_batch` metrics combine: one Reducer for all, or one per name."""
        return _reducer.Reducer.AVG
