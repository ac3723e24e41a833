"""Determined's flagship tutorial shape (examples/tutorials/mnist_pytorch) on a plain dettui
install, where `determined.pytorch` is dettui's: train.py with a PyTorchTrial, `pytorch.init()`
and `pytorch.Trainer.fit(max_length=Epoch(1))`, no `global_batch_size` hyperparameter, run as
the tutorial's const, adaptive_asha (time_metric batches) and 2-slot distributed configs (data
shrunk to random MNIST-shaped tensors); beside them an old-style `model_def:Trial` entrypoint
with its periods in records. The checkpoints trials wrote hold their code/ and Determined's
load_data.json: the real determined==0.38.1 SDK loads their trials without being given the
class."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV
from tests.conftest import Served

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480),  # five trials on two slots
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

TRAIN = '''
import argparse
import logging
import pathlib
from typing import Any, Dict

import data
import model
import torch
from ruamel import yaml
from torch import nn

import determined as det
from determined import pytorch


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: Dict) -> None:
        self.context = context
        self.data_dir = pathlib.Path("data")
        self.batch_size = 64
        self.per_slot_batch_size = self.batch_size // self.context.distributed.get_size()
        self.loss_fn = nn.NLLLoss()
        self.model = self.context.wrap_model(model.build_model(hparams=hparams))
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"])
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        train_data = data.get_dataset(self.data_dir, train=True)
        return pytorch.DataLoader(train_data, batch_size=self.per_slot_batch_size)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        validation_data = data.get_dataset(self.data_dir, train=False)
        return pytorch.DataLoader(validation_data, batch_size=self.per_slot_batch_size)

    def train_batch(self, batch, epoch_idx: int, batch_idx: int) -> Dict[str, torch.Tensor]:
        batch_data, labels = batch
        output = self.model(batch_data)
        loss = self.loss_fn(output, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx: int) -> Dict[str, Any]:
        batch_data, labels = batch
        output = self.model(batch_data)
        validation_loss = self.loss_fn(output, labels).item()
        pred = output.argmax(dim=1, keepdim=True)
        accuracy = pred.eq(labels.view_as(pred)).sum().item() / len(batch_data)
        return {"validation_loss": validation_loss, "accuracy": accuracy}


def run(max_length, local: bool = False):
    info = det.get_cluster_info()
    if local:
        yml = yaml.YAML(typ="safe", pure=True)
        conf = yml.load(pathlib.Path("./const.yaml").read_text())
        hparams = conf["hyperparameters"]
        latest_checkpoint = None
    else:
        hparams = info.trial.hparams
        latest_checkpoint = info.latest_checkpoint
    with pytorch.init() as train_context:
        trial = MNistTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            max_length=max_length,
            latest_checkpoint=latest_checkpoint,
            validation_period=pytorch.Batch(100),
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batches", type=int)
    group.add_argument("--epochs", type=int)
    args = parser.parse_args()
    if args.batches:
        max_length = pytorch.Batch(args.batches)
    elif args.epochs:
        max_length = pytorch.Epoch(args.epochs)
    else:
        max_length = pytorch.Batch(100)
    local_training = det.get_cluster_info() is None
    run(max_length, local=local_training)
'''

MODEL = '''
from typing import Any, Dict

import torch
from torch import nn

from determined import pytorch


class Flatten(nn.Module):
    def forward(self, *args: pytorch.TorchData, **kwargs: Any) -> torch.Tensor:
        x = args[0]
        return x.contiguous().view(x.size(0), -1)


def build_model(hparams: Dict) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, hparams["n_filters1"], 3, 1),
        nn.ReLU(),
        nn.Conv2d(hparams["n_filters1"], hparams["n_filters2"], 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout2d(hparams["dropout1"]),
        Flatten(),
        nn.Linear(144 * hparams["n_filters2"], 128),
        nn.ReLU(),
        nn.Dropout2d(hparams["dropout2"]),
        nn.Linear(128, 10),
        nn.LogSoftmax(dim=1),
    )
'''

DATA = '''
import pathlib
from typing import Any

import torch


def get_dataset(data_dir: pathlib.Path, train: bool) -> Any:
    """256 training and 64 validation images: random, MNIST-shaped."""
    g = torch.Generator().manual_seed(0 if train else 1)
    n = 256 if train else 64
    return torch.utils.data.TensorDataset(torch.randn(n, 1, 28, 28, generator=g),
                                          torch.randint(0, 10, (n,), generator=g))
'''

LEGACY = '''
import torch
from torch.utils.data import TensorDataset

from determined import pytorch


class LinearTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx):
        x, y = batch
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}

    def _data(self):
        x = torch.linspace(-1, 1, 64).unsqueeze(1)
        return pytorch.DataLoader(TensorDataset(x, 2 * x),
                                  batch_size=self.context.get_per_slot_batch_size())

    build_training_data_loader = _data
    build_validation_data_loader = _data
'''

HPARAMS = """
hyperparameters:
  learning_rate: 1.0
  n_filters1: 8
  n_filters2: 8
  dropout1: 0.25
  dropout2: 0.5
"""
SEARCHER = "searcher: {name: single, metric: validation_loss, smaller_is_better: true}\n"
CONFIGS = {
    "const.yaml": "name: mnist_pytorch_const\n" + HPARAMS + SEARCHER
    + "entrypoint: python3 train.py --epochs 1\n",
    "distributed.yaml": "name: mnist_pytorch_distributed\n" + HPARAMS + SEARCHER
    + "resources: {slots_per_trial: 2}\n"
    + "entrypoint: >-\n  python3 -m determined.launch.torch_distributed\n"
    + "  python3 train.py --epochs 1\n",
    "adaptive.yaml": textwrap.dedent("""
        name: mnist_pytorch_adaptive_search
        hyperparameters:
          learning_rate: {type: double, minval: .0001, maxval: 1.0}
          n_filters1: {type: int, minval: 4, maxval: 8}
          n_filters2: {type: int, minval: 4, maxval: 8}
          dropout1: {type: double, minval: .2, maxval: .8}
          dropout2: {type: double, minval: .2, maxval: .8}
        searcher:
          name: adaptive_asha
          metric: validation_loss
          smaller_is_better: true
          max_trials: 2
          time_metric: batches
          max_time: 4  # 256 training images with batch size 64
        entrypoint: python3 train.py --epochs 1
        """),
    # the old-style entrypoint: 64 records, 16 a batch, 4 batches an epoch
    "legacy.yaml": textwrap.dedent("""
        name: pytorch_trial_legacy
        entrypoint: model_def:LinearTrial
        hyperparameters: {global_batch_size: 16}
        searcher: {name: single, metric: validation_loss, max_length: {epochs: 2}}
        min_validation_period: {records: 64}
        """),
}

LOAD = """
import json, sys
from determined import pytorch

trial = pytorch.load_trial_from_checkpoint_path(
    sys.argv[1], trial_kwargs={"hparams": json.loads(sys.argv[2])})
print("loaded", type(trial).__module__, type(trial).__qualname__,
      sum(p.numel() for p in trial.model.parameters()))
"""


LOAD_LEGACY = """
import sys
from determined import pytorch

trial = pytorch.load_trial_from_checkpoint_path(sys.argv[1])
print("loaded", type(trial).__module__, type(trial).__qualname__)
"""


def _stored(served: Served, uuid: str) -> Path:
    """The checkpoint's directory in the master's shared_fs storage (what a download gives)."""
    (path,) = [p for p in served.state_dir.rglob(uuid) if p.is_dir()]
    return path


def _context(tmp_path: Path) -> Path:
    ctx = tmp_path / "mnist_pytorch"
    ctx.mkdir()
    for name, text in {"train.py": TRAIN, "model.py": MODEL, "data.py": DATA,
                       "model_def.py": LEGACY, **CONFIGS}.items():
        (ctx / name).write_text(text.lstrip())
    return ctx


def test_the_mnist_tutorial_runs_as_written(served: Served, tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    ids = {}
    for name in CONFIGS:
        out = served.cli("e", "create", str(ctx / name), str(ctx)).stdout
        ids[name] = int(out.split("Created experiment ")[1].split()[0])
    for name, exp_id in ids.items():
        exp = served.wait_experiment(exp_id, timeout=240)
        trials = served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"]
        logs = "\n".join(served.cli("t", "logs", str(t["id"])).stdout for t in trials)
        assert exp["state"] == "STATE_COMPLETED", f"{name}:\n{logs}"
        assert "global_batch_size" not in logs, logs
        assert "validation at batch 4:" in logs, f"{name}: one epoch is 4 batches:\n{logs}"
    legacy = served.cli("t", "logs", str(served.api(
        "GET", f"/api/v1/experiments/{ids['legacy.yaml']}/trials")["trials"][0]["id"])).stdout
    assert "validation at batch 8:" in legacy and "training done after 8 batches" in legacy
    assert len(served.api("GET", f"/api/v1/experiments/{ids['adaptive.yaml']}/trials")
               ["trials"]) == 2
    # the loop writes its metrics as TensorBoard events, as Determined's does
    events = list(served.state_dir.rglob(
        f"tensorboard/experiment/{ids['const.yaml']}/trial/*/events.out.*"))
    assert events, "no TensorBoard events for the const trial"

    # the real SDK loads the trial from the checkpoint alone (its code/ and load_data.json)
    (checkpoint,) = served.api(
        "GET", f"/api/v1/experiments/{ids['const.yaml']}/checkpoints")["checkpoints"]
    got = _stored(served, checkpoint["uuid"])
    assert sorted(p.name for p in (got / "code").iterdir()) == sorted(
        ["train.py", "model.py", "data.py", "model_def.py", *CONFIGS])
    hparams = {"learning_rate": 1.0, "n_filters1": 8, "n_filters2": 8, "dropout1": 0.25,
               "dropout2": 0.5}
    load = subprocess.run([str(Path(DET_VENV or "") / "bin" / "python"), "-c", LOAD, str(got),
                           json.dumps(hparams)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert load.returncode == 0, load.stderr
    assert load.stdout.startswith("loaded train MNistTrial"), load.stdout

    # the old-style trial's last checkpoint loads through the real SDK's legacy shims
    last = max(served.api("GET", f"/api/v1/experiments/{ids['legacy.yaml']}/checkpoints")
               ["checkpoints"], key=lambda c: c["metadata"]["steps_completed"])
    assert last["metadata"]["steps_completed"] == 8
    load = subprocess.run([str(Path(DET_VENV or "") / "bin" / "python"), "-c", LOAD_LEGACY,
                           str(_stored(served, last["uuid"]))], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert load.returncode == 0, load.stderr
    assert load.stdout.startswith("loaded model_def LinearTrial"), load.stdout
