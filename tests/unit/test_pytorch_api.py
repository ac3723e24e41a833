"""Determined's PyTorch API on dettui's loop, off a cluster: `pytorch.init` + `Trainer.fit`,
callbacks at their points, reducers, `evaluation_reducer`, and `batch_idx` given only to
methods that take it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dettui import pytorch
from dettui.pytorch._units import accepts


@pytest.fixture(autouse=True)
def _small_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a cluster a checkpoint's code/ is the working directory: keep it small."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")


class _T:
    def one(self, batch): ...  # noqa: ANN001, ANN201
    def two(self, batch, batch_idx): ...  # noqa: ANN001, ANN201
    def other(self, batch, i): ...  # noqa: ANN001, ANN201


def test_batch_idx_goes_only_where_it_is_taken() -> None:
    t = _T()
    assert not accepts(t.one, "batch_idx", 2)
    assert accepts(t.two, "batch_idx", 2)
    assert accepts(t.other, "batch_idx", 2)  # by position, as Determined's has_param


class Recorder(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        self.calls.append(f"startup {first_batch_idx} {checkpoint_uuid}")

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.calls.append(f"epoch {epoch_idx}")

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.calls.append(f"validated {metrics['count']}")

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.calls.append("checkpoint")

    def on_trial_shutdown(self) -> None:
        self.calls.append("shutdown")


class OneArgTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.sizes = context.wrap_reducer(sum, name="rows_seen", for_training=False)
        self.recorder = Recorder()
        x = torch.arange(12, dtype=torch.float32).unsqueeze(1)
        self.data = torch.utils.data.TensorDataset(x, x)

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"rec": self.recorder}

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.data, batch_size=4)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.data, batch_size=5)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        loss = nn.functional.mse_loss(self.model(batch[0]), batch[1])
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:  # no batch_idx, as Determined allows
        self.sizes.update(len(batch[0]))
        return {"count": float(len(batch[0])), "top": float(batch[0].max())}

    def evaluation_reducer(self) -> dict[str, pytorch.Reducer]:
        return {"count": pytorch.Reducer.SUM, "top": pytorch.Reducer.MAX}


def test_trainer_fit_off_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    with pytorch.init(hparams={"global_batch_size": 4}) as context:
        trial = OneArgTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Epoch(2),
                                            validation_period=pytorch.Batch(3),
                                            checkpoint_period=pytorch.Batch([4]))
        assert context.current_train_batch() == 5  # the last batch's index, as Determined's
    calls = trial.recorder.calls
    assert calls[0] == "startup 0 None" and calls[-1] == "shutdown"
    # validations at batches 3 and 6, each SUM of 12 over 3 batches; off a cluster the
    # checkpoint policy is 'all': a checkpoint after each, and at batch 4 (the listed step)
    assert calls[1:-1] == ["epoch 0", "validated 12.0", "checkpoint", "epoch 1", "checkpoint",
                           "validated 12.0", "checkpoint"], calls
    saved = list((tmp_path / "dettui" / "checkpoints").iterdir())
    assert len(saved) == 3


def test_fit_needs_a_length_off_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    with pytorch.init(hparams={"global_batch_size": 4}) as context, \
            pytest.raises(ValueError, match="max_length"):
        pytorch.Trainer(OneArgTrial(context), context).fit()


def test_samplers_and_to_device() -> None:
    base = list(pytorch.samplers.DistributedSampler(range(10), num_workers=3, rank=1))
    assert base == [1, 4, 7]
    batches = torch.utils.data.BatchSampler(range(7), batch_size=2, drop_last=False)
    assert list(pytorch.samplers.SkipBatchSampler(batches, 2)) == [[4, 5], [6]]
    import numpy as np

    moved = pytorch.to_device({"a": np.ones(2), "b": [torch.zeros(1)], "c": "text"},
                              torch.device("cpu"))
    assert isinstance(moved["a"], torch.Tensor) and moved["c"] == "text"


class ScaledTrial(OneArgTrial):
    """Determined's mixed-precision calls: a GradScaler through `wrap_scaler` and
    `step_optimizer(scaler=)`, the forward pass under `autocast_forward_pass`."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.scaler = context.wrap_scaler(
            torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=1))
        self.epochs_seen: list[tuple[int, int]] = []

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        self.epochs_seen.append((epoch_idx, self.context.current_train_epoch()))
        loss = nn.functional.mse_loss(self.model(batch[0]), batch[1])
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.opt, scaler=self.scaler)
        return {"loss": loss}


def test_wrap_scaler_steps_unscaled_updates_and_is_checkpointed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    with pytorch.init(hparams={"global_batch_size": 4}) as context:
        trial = ScaledTrial(context)
        with pytest.raises(ValueError, match="only once"):
            context.wrap_scaler(trial.scaler)
        with torch.no_grad():
            trial.model.weight.fill_(1.0)
            trial.model.bias.fill_(0.0)
        x = torch.ones(1, 1)
        loss = nn.functional.mse_loss(trial.model(x), torch.zeros(1, 1))  # (w - 0)^2: grad 2
        context.backward(trial.scaler.scale(loss))
        context.step_optimizer(trial.opt, scaler=trial.scaler)
        # the step is unscaled: lr 0.1 * grad 2, not 0.1 * 2 * the scale of 4
        assert trial.model.weight.item() == pytest.approx(0.8)
        trial.scaler.update()  # scale 8 now; the harness calls update() after each batch
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(3),
                                            checkpoint_period=pytorch.Batch(3))
        assert trial.scaler.get_scale() == 8.0 * 2 ** 3
        assert trial.epochs_seen == [(0, 0), (0, 0), (0, 0)]
    (saved,) = list((tmp_path / "dettui" / "checkpoints").iterdir())
    state = torch.load(saved / "state_dict.pth", weights_only=False)
    assert state["scaler_state_dict"]["scale"] == 64.0


def test_current_train_epoch_is_the_epoch_of_the_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Determined's (the current batch index // the epoch length): the epoch `train_batch`
    is in, and after training the last one's."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    with pytorch.init(hparams={"global_batch_size": 4}) as context:
        trial = ScaledTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Epoch(2))
        assert context.current_train_epoch() == 1
    # 12 records, 4 a batch: 3 batches an epoch
    assert trial.epochs_seen == [(0, 0)] * 3 + [(1, 1)] * 3


def test_autocast_forward_pass_runs_under_autocast_and_returns_float32() -> None:
    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.inner: torch.dtype | None = None

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            out = self.lin(x)
            self.inner = out.dtype
            return {"out": out, "ids": torch.arange(2)}

    with pytorch.init(hparams={}) as context:
        probe = context.autocast_forward_pass(Probe())
        got = probe(torch.randn(2, 4))
    assert probe.inner is torch.bfloat16, "the forward pass ran under CPU autocast"
    assert got["out"].dtype is torch.float32 and got["ids"].dtype is torch.int64


def test_get_tensorboard_writer_writes_under_get_tensorboard_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    with pytorch.init(hparams={}) as context:
        path = context.get_tensorboard_path()
        writer = context.get_tensorboard_writer()
        assert context.get_tensorboard_writer() is writer
        writer.add_scalar("loss", 0.5, 1)
        writer.flush()
    assert path == tmp_path / "work" / "tensorboard"
    assert [p.name.startswith("events.out.tfevents") for p in path.iterdir()] == [True]


def test_load_trial_from_checkpoint_path(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial of a checkpoint, its model and optimizer as saved: the class found by the
    name the checkpoint records (importable here), or given."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    with pytorch.init(hparams={"global_batch_size": 4, "lr": 0.5}) as context:
        trained = OneArgTrial(context)
        pytorch.Trainer(trained, context).fit(max_length=pytorch.Batch(3))
    (path,) = list((tmp_path / "dettui" / "checkpoints").iterdir())
    loaded = pytorch.load_trial_from_checkpoint_path(str(path))
    assert type(loaded) is OneArgTrial and loaded.context.get_hparam("lr") == 0.5
    assert torch.equal(loaded.model.weight, trained.model.weight)
    assert loaded.opt.state_dict()["state"].keys() == trained.opt.state_dict()["state"].keys()
    again = pytorch.load_trial_from_checkpoint_path(path, trial_class=ScaledTrial)
    assert torch.equal(again.model.bias, trained.model.bias)
    (path / "load_data.json").write_text('{"trial_type": "PyTorchTrial", '
                                         '"trial_cls_spec": "no_such_module:T"}')
    with pytest.raises(ValueError, match="Automatic import logic failed"):
        pytorch.load_trial_from_checkpoint_path(path)
