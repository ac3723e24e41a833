# ruff: noqa
# The tutorial's data.py (examples/tutorials/mnist_pytorch at 0.38.1) with MNIST's download
# replaced by random tensors of MNIST's shape (1x28x28 images, labels 0-9), 8 batches of 8.
import pathlib
from typing import Any

import filelock
import torch

TRAIN_RECORDS = 64
VALIDATION_RECORDS = 16


def get_dataset(data_dir: pathlib.Path, train: bool) -> Any:
    data_dir.mkdir(parents=True, exist_ok=True)

    # Use a file lock so that only one worker on each node downloads.
    with filelock.FileLock(str(data_dir / "lock")):
        generator = torch.Generator().manual_seed(0 if train else 1)
        records = TRAIN_RECORDS if train else VALIDATION_RECORDS
        images = torch.randn(records, 1, 28, 28, generator=generator)
        labels = torch.randint(0, 10, (records,), generator=generator)
        return torch.utils.data.TensorDataset(images, labels)
