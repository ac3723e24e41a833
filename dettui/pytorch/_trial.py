"""PyTorchTrial and its context, with Determined's names and signatures.

A trial class builds its model, optimizer and data through the context and implements
`train_batch` and `evaluate_batch`; the harness (`dettui.launch.harness`) owns the loop,
validation and checkpoint periods, preemption, resume and DDP.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import data as torch_data

from dettui import core

log = logging.getLogger("dettui.pytorch")
TorchData = Any  # a tensor, or a dict / list / tuple of them: a batch
Metrics = dict[str, Any]


class DataLoader:
    """Describes a torch DataLoader; the harness builds it per rank.

    Takes torch.utils.data.DataLoader's arguments. `batch_size` is the per-slot batch size
    (`context.get_per_slot_batch_size()`); in a distributed trial each rank reads its own part
    of the dataset, and a resumed trial continues mid-epoch without re-reading what it skipped.
    """

    def __init__(self, dataset: torch_data.Dataset[Any], batch_size: int = 1,
                 shuffle: bool = False, drop_last: bool = False, **kwargs: Any) -> None:
        if "sampler" in kwargs or "batch_sampler" in kwargs:
            raise ValueError("dettui.pytorch.DataLoader builds its own sampler; pass shuffle "
                             "or return a torch.utils.data.DataLoader instead")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.kwargs = kwargs

    def build(self, rank: int, size: int, seed: int) -> _Loader:
        return _Loader(self, rank, size, seed)


class _Loader:
    """Batches of one rank, epoch by epoch, from any batch index."""

    def __init__(self, spec: DataLoader, rank: int, size: int, seed: int) -> None:
        self.spec = spec
        self.sampler = torch_data.DistributedSampler(
            spec.dataset, num_replicas=size, rank=rank, shuffle=spec.shuffle, seed=seed,
            drop_last=spec.drop_last)

    def __len__(self) -> int:
        n = len(self.sampler)
        b = self.spec.batch_size
        return n // b if self.spec.drop_last else -(-n // b)

    def batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        self.sampler.set_epoch(epoch)
        indices = list(self.sampler)
        b = self.spec.batch_size
        chunks = [indices[i:i + b] for i in range(0, len(indices), b)]
        if self.spec.drop_last and chunks and len(chunks[-1]) < b:
            chunks.pop()
        loader = torch_data.DataLoader(self.spec.dataset, batch_sampler=chunks[start:],
                                       **self.spec.kwargs)
        yield from loader


class _PlainLoader:
    """A torch DataLoader returned as is: each rank reads all of it."""

    def __init__(self, loader: torch_data.DataLoader[Any]) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        for i, batch in enumerate(self.loader):
            if i >= start:
                yield batch


def as_loader(obj: Any, rank: int, size: int, seed: int, what: str) -> _Loader | _PlainLoader:
    if isinstance(obj, DataLoader):
        return obj.build(rank, size, seed)
    if isinstance(obj, torch_data.DataLoader):
        if size > 1:
            log.warning("%s is a torch DataLoader: every rank reads all of it; return a "
                        "dettui.pytorch.DataLoader to split it across ranks", what)
        return _PlainLoader(obj)
    raise TypeError(f"{what} must return a dettui.pytorch.DataLoader or a "
                    f"torch.utils.data.DataLoader, not {type(obj).__name__}")


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

    def __init__(self, core_context: core.Context, hparams: dict[str, Any],
                 config: dict[str, Any], device: torch.device | None = None) -> None:
        self._core = core_context
        self.distributed = core_context.distributed
        self._hparams = hparams
        self._config = config
        self.device = device or torch.device("cpu")
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._global_batch_size = self._batch_size()

    def _batch_size(self) -> int | None:
        raw = self._hparams.get("global_batch_size")
        if raw is None:
            return None
        size = int(raw)
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
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        if name not in self._hparams:
            raise ValueError(f"hyperparameter '{name}' is not defined; defined: "
                             f"{sorted(self._hparams)}")
        return self._hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        return dict(self._config)

    def get_data_config(self) -> dict[str, Any]:
        return dict(self._config.get("data") or {})

    def get_global_batch_size(self) -> int:
        if self._global_batch_size is None:
            raise ValueError("a PyTorchTrial needs hyperparameters.global_batch_size")
        return self._global_batch_size

    def get_per_slot_batch_size(self) -> int:
        return self.get_global_batch_size() // self.distributed.size

    def get_trial_id(self) -> int:
        info = self._core.info
        return info.trial.trial_id if info else 0

    def get_experiment_id(self) -> int:
        info = self._core.info
        return info.trial.experiment_id if info else 0

    def get_trial_seed(self) -> int:
        info = self._core.info
        return info.trial.trial_seed if info else 0

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
        if isinstance(data, torch.Tensor):
            return data.to(self.device)
        if isinstance(data, dict):
            return {k: self.to_device(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return type(data)(self.to_device(v) for v in data)
        return data

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Gradients of `loss`; DDP averages them across ranks during this call."""
        loss.backward(**kwargs)

    def step_optimizer(self, optimizer: torch.optim.Optimizer,
                       clip_grads: Callable[[Iterator[nn.Parameter]], None] | None = None,
                       auto_zero_grads: bool = True) -> None:
        if clip_grads is not None:
            clip_grads(p for group in optimizer.param_groups for p in group["params"])
        optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for sched in self.lr_schedulers:
            if sched.step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
                sched.step()

    def is_epoch_start(self) -> bool:
        return bool(getattr(self, "_batch_idx", 0) == 0)

    def is_epoch_end(self) -> bool:
        return bool(getattr(self, "_epoch_end", False))


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
