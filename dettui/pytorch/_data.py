"""Data for a PyTorchTrial: dettui's DataLoader (split across ranks, resumable mid-epoch), a
torch DataLoader returned as is, and `to_device`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils import data as torch_data

log = logging.getLogger("dettui.pytorch")
TorchData = Any  # a tensor, or a dict / list / tuple of them: a batch


def to_device(data: Any, device: torch.device, warned_types: set[type] | None = None) -> Any:
    """Determined's `pytorch.to_device`: tensors (and anything with a `.to`) moved to `device`,
    numpy arrays of numbers made tensors, dicts, lists and tuples walked; anything else is
    returned as it is, with one warning per type."""
    warned = set() if warned_types is None else warned_types
    if isinstance(data, dict):
        return {k: to_device(v, device, warned) for k, v in data.items()}
    if isinstance(data, list):
        return [to_device(v, device, warned) for v in data]
    if isinstance(data, tuple):
        return tuple(to_device(v, device, warned) for v in data)
    if isinstance(data, np.ndarray) and data.dtype.kind in "fciub":
        return torch.from_numpy(data).to(device)
    if callable(getattr(data, "to", None)) and not isinstance(data, (str, bytes, np.ndarray)):
        return data.to(device)
    if type(data) not in warned and not isinstance(data, (int, float, str, bool, type(None))):
        warned.add(type(data))
        log.warning("Was not able to move data item of type '%s' to device.",
                    type(data).__name__)
    return data


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
        yield from self.torch_loader(epoch, start)

    def torch_loader(self, epoch: int = 0, start: int = 0) -> torch_data.DataLoader[Any]:
        """The torch DataLoader of this rank's batches of `epoch`, from batch `start` on (what
        `evaluate_full_dataset` is given, as Determined gives a torch DataLoader)."""
        self.sampler.set_epoch(epoch)
        indices = list(self.sampler)
        b = self.spec.batch_size
        chunks = [indices[i:i + b] for i in range(0, len(indices), b)]
        if self.spec.drop_last and chunks and len(chunks[-1]) < b:
            chunks.pop()
        return torch_data.DataLoader(self.spec.dataset, batch_sampler=chunks[start:],
                                     **self.spec.kwargs)


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
