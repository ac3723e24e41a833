"""`dettui.pytorch`: Determined's PyTorchTrial API, run by `python -m dettui.launch.harness`
(or by `Trainer.fit` in a script of your own).

    from dettui import pytorch

    class MyTrial(pytorch.PyTorchTrial):
        def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
            self.context = context
            self.model = context.wrap_model(build_model())
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def train_batch(self, batch, epoch_idx, batch_idx):
            loss = ...
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):  # batch_idx too, if you want it
            return {"validation_loss": ...}

        def build_training_data_loader(self):
            return pytorch.DataLoader(dataset, batch_size=self.context.get_per_slot_batch_size())

        def build_validation_data_loader(self): ...

Entrypoint: `python3 -m dettui.launch.torch_distributed --trial model_def:MyTrial` (or the
legacy `model_def:MyTrial`, or Determined's own `determined.launch.torch_distributed` line).
Callbacks (`build_callbacks`), `MetricReducer`s (`context.wrap_reducer`), `evaluation_reducer`,
`wrap_scaler`, `samplers`, `to_device` and `load_trial_from_checkpoint_path` are Determined's.
"""

from dettui.pytorch import samplers
from dettui.pytorch._callback import PyTorchCallback
from dettui.pytorch._data import DataLoader, TorchData, to_device
from dettui.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
from dettui.pytorch._reducer import MetricReducer, Reducer
from dettui.pytorch._trainer import Trainer, init
from dettui.pytorch._trial import LRScheduler, PyTorchTrial, PyTorchTrialContext
from dettui.pytorch._units import Batch, Epoch, TrainUnit

__all__ = ["Batch", "CheckpointLoadContext", "DataLoader", "Epoch", "LRScheduler",
           "MetricReducer", "PyTorchCallback", "PyTorchTrial", "PyTorchTrialContext", "Reducer",
           "TorchData", "TrainUnit", "Trainer", "init", "load_trial_from_checkpoint_path",
           "samplers", "to_device"]
