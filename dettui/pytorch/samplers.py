"""Determined's `pytorch.samplers`: wrappers for samplers a trial builds itself (dettui's own
DataLoader splits and resumes without them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, Sampler


class RepeatSampler(Sampler[Any]):
    """Repeat a sampler forever."""

    def __init__(self, sampler: Sampler[Any]) -> None:
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.sampler


class RepeatBatchSampler(BatchSampler):
    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.batch_sampler


class DistributedSampler(Sampler[Any]):
    """Every `num_workers`-th index of a sampler, starting at `rank`."""

    def __init__(self, sampler: Sampler[Any], num_workers: int, rank: int) -> None:
        self.sampler, self.num_workers, self.rank = sampler, num_workers, rank

    def __len__(self) -> int:
        full = len(self.sampler)  # type: ignore[arg-type]
        return full // self.num_workers + (1 if self.rank < full % self.num_workers else 0)

    def __iter__(self) -> Iterator[Any]:
        for i, index in enumerate(self.sampler):
            if i % self.num_workers == self.rank:
                yield index


class DistributedBatchSampler(BatchSampler):
    def __init__(self, batch_sampler: BatchSampler, num_workers: int, rank: int) -> None:
        self.batch_sampler, self.num_workers, self.rank = batch_sampler, num_workers, rank

    def __len__(self) -> int:
        full = len(self.batch_sampler)
        return full // self.num_workers + (1 if self.rank < full % self.num_workers else 0)

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.batch_sampler):
            if i % self.num_workers == self.rank:
                yield batch


class SkipBatchSampler(BatchSampler):
    """Skip the first `skip` batches (to resume mid-epoch)."""

    def __init__(self, batch_sampler: BatchSampler, skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, skip

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip)

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip:
                yield batch


SkipSampler = SkipBatchSampler


class ReproducibleShuffleSampler(Sampler[Any]):
    """A sampler's indices in an order fixed by `seed` and the epoch (`set_epoch`)."""

    def __init__(self, sampler: Sampler[Any], seed: int) -> None:
        self.sampler, self.seed, self.epoch = sampler, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        items = list(self.sampler)
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        for i in torch.randperm(len(items), generator=gen).tolist():
            yield items[i]

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]


class ReproducibleShuffleBatchSampler(ReproducibleShuffleSampler):
    def __init__(self, batch_sampler: BatchSampler, seed: int) -> None:
        super().__init__(batch_sampler, seed)
