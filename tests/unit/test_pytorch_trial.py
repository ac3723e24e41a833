"""The trial-class harness off a cluster: config periods as Determined's TrainUnits, metric
means, data positions on resume, batch-size split, and the errors a user meets loading a
trial."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from dettui import core, pytorch
from dettui.pytorch._controller import _mean

SAMPLE = Path(__file__).resolve().parents[2] / "sample_ctx"


def test_config_periods_become_train_units() -> None:
    """Determined's `TrainUnit._from_values`: records need global_batch_size, < 1 is never."""
    assert pytorch.TrainUnit._from_values(batches=7) == pytorch.Batch(7)
    assert pytorch.TrainUnit._from_values(records=640, global_batch_size=64) == pytorch.Batch(10)
    assert pytorch.TrainUnit._from_values(records=650, global_batch_size=64) == pytorch.Batch(10)
    assert pytorch.TrainUnit._from_values(epochs=2) == pytorch.Epoch(2)
    assert pytorch.TrainUnit._from_values(batches=0) == pytorch.Batch(sys.maxsize)
    with pytest.raises(ValueError, match="global_batch_size is required for RECORD"):
        pytorch.TrainUnit._from_values(records=640)
    assert pytorch.Batch([5, 30]).should_stop(30) and not pytorch.Batch(4).should_stop(0)


def test_metric_means_are_weighted_and_keep_non_numbers() -> None:
    rows = [({"loss": 1.0, "tag": "a"}, 3), ({"loss": 3.0, "tag": "b"}, 1)]
    assert _mean(rows) == {"loss": 1.5, "tag": "b"}


def test_the_loader_splits_ranks_and_resumes_mid_epoch() -> None:
    data = TensorDataset(torch.arange(20))
    spec = pytorch.DataLoader(data, batch_size=3, shuffle=True)
    r0, r1 = spec.build(0, 2, seed=5), spec.build(1, 2, seed=5)
    assert len(r0) == len(r1) == 4  # 10 items each, the last batch short
    seen0 = [b[0].tolist() for b in r0.batches(epoch=1)]
    seen1 = [b[0].tolist() for b in r1.batches(epoch=1)]
    flat = sorted(x for b in seen0 + seen1 for x in b)
    assert flat == list(range(20)), "the two ranks cover the data once"
    assert [b[0].tolist() for b in r0.batches(epoch=1, start=2)] == seen0[2:]
    assert seen0 != [b[0].tolist() for b in r0.batches(epoch=2)], "a new order per epoch"


def test_global_batch_size_splits_per_slot_and_drops_the_remainder() -> None:
    ctx = core.init()
    ctx.distributed = core.DistributedContext(rank=0, size=2)
    trial_ctx = pytorch.PyTorchTrialContext(ctx, {"global_batch_size": 65}, {})
    assert trial_ctx.get_global_batch_size() == 65
    assert trial_ctx.get_per_slot_batch_size() == 32
    with pytest.raises(ValueError, match="global_batch_size is undefined in this Trial"):
        pytorch.PyTorchTrialContext(ctx, {}, {}).get_global_batch_size()
    with pytest.raises(ValueError, match="hyperparameter 'lr' is not defined"):
        trial_ctx.get_hparam("lr")


def run_harness(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(SAMPLE.parent)}
    return subprocess.run([sys.executable, "-m", "dettui.launch.harness", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("spec", "message"), [
    ("model_def", "must be module:Class"),
    ("nowhere:Trial", "trial module 'nowhere' not found"),
    ("model_def:Missing", "module 'model_def' has no 'Missing'"),
    ("model_def:TensorDataset", "is not a subclass of dettui.pytorch.PyTorchTrial"),
])
def test_bad_trial_specs_say_what_is_wrong(spec: str, message: str) -> None:
    out = run_harness(SAMPLE, spec, "--config", "trial.yaml")
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_searched_hyperparameters_need_values_off_cluster(tmp_path: Path) -> None:
    config = (SAMPLE / "trial.yaml").read_text().replace(
        "learning_rate: 0.03", "learning_rate: {type: double, minval: 0.01, maxval: 0.1}")
    (tmp_path / "exp.yaml").write_text(config)
    (tmp_path / "model_def.py").write_text((SAMPLE / "model_def.py").read_text())
    out = run_harness(tmp_path, "model_def:SpiralsTrial", "--config", "exp.yaml")
    assert out.returncode == 2 and "['learning_rate'] are searched over" in out.stderr


def test_determined_trial_code_runs_unchanged(tmp_path: Path) -> None:
    """A model_def written for Determined: `from determined import pytorch` resolves to ours."""
    (tmp_path / "model_def.py").write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import TensorDataset
        import determined.pytorch as det_pytorch
        from determined.pytorch import PyTorchTrial, PyTorchTrialContext

        class LinearTrial(PyTorchTrial):
            def __init__(self, context: PyTorchTrialContext) -> None:
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
                return {"validation_error": torch.nn.functional.mse_loss(self.model(x), y)}

            def _data(self):
                x = torch.linspace(-1, 1, 64).unsqueeze(1)
                return det_pytorch.DataLoader(TensorDataset(x, 2 * x),
                                              batch_size=self.context.get_per_slot_batch_size())

            build_training_data_loader = _data
            build_validation_data_loader = _data
    """))
    (tmp_path / "exp.yaml").write_text(textwrap.dedent("""
        entrypoint: model_def:LinearTrial
        searcher: {name: single, metric: validation_error, max_length: {epochs: 3}}
        hyperparameters: {global_batch_size: 16}
        records_per_epoch: 64
        min_validation_period: {batches: 4}
    """))
    out = run_harness(tmp_path, "model_def:LinearTrial", "--config", "exp.yaml")
    assert out.returncode == 0, out.stderr
    assert "validation at batch 4:" in out.stdout and "validation at batch 12:" in out.stdout
    assert "training done after 12 batches" in out.stdout


def test_records_periods_need_global_batch_size(tmp_path: Path) -> None:
    """As Determined's harness: a period in records converts with global_batch_size only."""
    config = (SAMPLE / "trial.yaml").read_text().replace("  global_batch_size: 64\n", "")
    config = config.replace("min_validation_period:\n  batches: 50",
                            "min_validation_period:\n  records: 3200")
    (tmp_path / "exp.yaml").write_text(config)
    (tmp_path / "model_def.py").write_text((SAMPLE / "model_def.py").read_text())
    out = run_harness(tmp_path, "model_def:SpiralsTrial", "--config", "exp.yaml")
    assert out.returncode == 2, out.stderr
    assert "global_batch_size is required for RECORD units" in out.stderr, out.stderr
