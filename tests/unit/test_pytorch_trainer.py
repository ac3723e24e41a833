"""`pytorch.Trainer.fit` off a cluster, as Determined 0.38.1's: no global_batch_size needed,
epochs counted from the data loader, Batch/Epoch periods, the checkpoint policy, test_mode,
callbacks in Determined's order, and a resume from `latest_checkpoint`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dettui import pytorch


@pytest.fixture(autouse=True)
def _off_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # a checkpoint's code/ is the working directory


class Hooks(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.loaded: dict[str, Any] | None = None

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        self.calls.append(f"startup {first_batch_idx} {checkpoint_uuid is not None}")

    def on_training_start(self) -> None:
        self.calls.append("start")

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.calls.append(f"epoch {epoch_idx}")

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.calls.append(f"end {epoch_idx}")

    def on_training_workload_end(self, avg_metrics: dict[str, Any],
                                 batch_metrics: list[dict[str, Any]]) -> None:
        self.calls.append(f"workload {len(batch_metrics)}")

    def on_validation_start(self) -> None:
        self.calls.append("val")

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.calls.append(f"val {metrics['n']:g}")

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.calls.append("ckpt")

    def on_trial_shutdown(self) -> None:
        self.calls.append("shutdown")

    def state_dict(self) -> dict[str, Any]:
        return {"calls": len(self.calls)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded = state_dict


class TutorialTrial(pytorch.PyTorchTrial):
    """The tutorial's shape: a batch size of its own, hyperparameters passed in, none named
    global_batch_size."""

    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict[str, Any]) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(),
                                                          lr=hparams["lr"]))
        self.hooks = Hooks()
        x = torch.arange(10, dtype=torch.float32).unsqueeze(1)
        self.data = torch.utils.data.TensorDataset(x, 2 * x)

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"hooks": self.hooks}

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.data, batch_size=4)  # 3 batches an epoch

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.data, batch_size=5)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        loss = nn.functional.mse_loss(self.model(batch[0]), batch[1])
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"n": float(len(batch[0]))}

    def evaluation_reducer(self) -> pytorch.Reducer:
        return pytorch.Reducer.SUM


def _fit(**kwargs: Any) -> TutorialTrial:
    with pytorch.init() as context:
        trial = TutorialTrial(context, {"lr": 0.01})
        pytorch.Trainer(trial, context).fit(**kwargs)
    return trial


def _checkpoints(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "dettui" / "checkpoints").iterdir(), key=lambda p: p.stat().st_mtime)


def test_an_epoch_is_the_loaders_length_and_no_global_batch_size_is_needed(
        tmp_path: Path) -> None:
    trial = _fit(max_length=pytorch.Epoch(2), validation_period=pytorch.Epoch(1))
    assert trial.hooks.calls == [
        "startup 0 False", "start", "epoch 0", "end 0", "workload 3", "val", "val 10",
        "ckpt",  # off a cluster the policy is 'all': a checkpoint after each validation
        "epoch 1", "end 1", "workload 3", "val", "val 10", "ckpt", "shutdown"]
    with pytest.raises(ValueError, match="global_batch_size is undefined in this Trial"):
        trial.context.get_global_batch_size()
    assert len(_checkpoints(tmp_path)) == 2


def test_periods_never_come_by_default_and_policy_none_checkpoints_only_at_the_end(
        tmp_path: Path) -> None:
    trial = _fit(max_length=pytorch.Batch(5), reporting_period=pytorch.Batch(2),
                 checkpoint_policy="none")
    assert [c for c in trial.hooks.calls if c.startswith(("workload", "val", "ckpt"))] == [
        "workload 2", "workload 2", "workload 1", "val", "val 10", "ckpt"]
    assert len(_checkpoints(tmp_path)) == 1


def test_test_mode_trains_and_validates_one_batch() -> None:
    trial = _fit(max_length=pytorch.Epoch(5), test_mode=True)
    assert [c for c in trial.hooks.calls if c.startswith(("workload", "val"))] == [
        "workload 1", "val", "val 5"]
    assert trial.context.current_train_batch() == 0


def test_fit_resumes_from_latest_checkpoint_at_its_batch(tmp_path: Path) -> None:
    first = _fit(max_length=pytorch.Batch(4))
    (saved,) = _checkpoints(tmp_path)
    with pytorch.init() as context:
        trial = TutorialTrial(context, {"lr": 0.01})
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(6),
                                            latest_checkpoint=saved.name)
    # the callback's state as it was saved (before the checkpoint's own hook)
    assert trial.hooks.loaded == {"calls": first.hooks.calls.index("ckpt")}
    assert trial.hooks.calls[0] == "startup 0 True"
    # batches 4 and 5: the rest of epoch 1 (it began at batch 3)
    assert [c for c in trial.hooks.calls if c.startswith(("epoch", "end", "workload"))] == [
        "end 1", "workload 2"]
    assert context.current_train_batch() == 5


def test_fit_refuses_what_determined_refuses() -> None:
    with pytest.raises(ValueError, match="max_length must be defined in local training mode"):
        _fit()
    with pytest.raises(TypeError, match="max_length must either be a det.pytorch.Batch"):
        _fit(max_length=pytorch.Batch([3, 4]))
    with pytest.raises(ValueError, match="exactly one of: `evaluate_batch"), \
            pytorch.init() as context:
        pytorch.Trainer(BothTrial(context, {"lr": 0.1}), context).fit(
            max_length=pytorch.Batch(1))


class BothTrial(TutorialTrial):
    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        return {}


def test_a_checkpoint_holds_the_code_its_trial_is_loaded_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a cluster code/ is the working directory (.detignore applied); the trial class is
    imported from there, by the name load_data.json records."""
    work = tmp_path / "work"
    (work / "mytrial.py").write_text(
        "from tests.unit.test_pytorch_trainer import TutorialTrial\n\n\n"
        "class MyTrial(TutorialTrial):\n"
        "    def __init__(self, context, hparams=None):\n"
        "        super().__init__(context, hparams or {'lr': 0.5})\n")
    (work / "big.bin").write_bytes(b"x" * 100)
    (work / ".detignore").write_text("*.bin\n")
    monkeypatch.syspath_prepend(str(work))
    import mytrial  # type: ignore[import-not-found]

    with pytorch.init(hparams={"lr": 0.5}) as context:
        pytorch.Trainer(mytrial.MyTrial(context), context).fit(max_length=pytorch.Batch(2))
    (saved,) = _checkpoints(tmp_path)
    code = {p.name for p in (saved / "code").iterdir()}
    assert "mytrial.py" in code and not code & {"big.bin", ".detignore"}, code
    (work / "mytrial.py").unlink()
    monkeypatch.delitem(sys.modules, "mytrial")
    loaded = pytorch.load_trial_from_checkpoint_path(saved)
    assert type(loaded).__qualname__ == "MyTrial" and "mytrial" not in sys.modules
    assert loaded.context.get_hparams() == {"lr": 0.5}


class FullDatasetTrial(TutorialTrial):
    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        assert isinstance(data_loader, torch.utils.data.DataLoader)
        return {"n": float(sum(len(x) for x, _ in data_loader))}


def test_evaluate_full_dataset_is_given_a_torch_data_loader() -> None:
    with pytorch.init() as context:
        trial = FullDatasetTrial(context, {"lr": 0.01})
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(1))
    assert "val 10" in trial.hooks.calls
