import os
import time

import determined as det
import torch
from determined import pytorch
from torch import nn


class Counter(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.validations = 0

    def on_validation_end(self, metrics):
        self.validations += 1
        print("callback validation", self.validations, "max_abs_err" in metrics, flush=True)

    def on_training_epoch_end(self, epoch_idx):
        print("callback epoch end", epoch_idx, flush=True)

    def state_dict(self):
        return {"validations": self.validations}

    def load_state_dict(self, state_dict):
        self.validations = state_dict["validations"]
        print("callback restored", self.validations, flush=True)


class MaxAbs(pytorch.MetricReducer):
    def __init__(self) -> None:
        self.reset()

    def reset(self):
        self.worst = 0.0

    def update(self, value):
        self.worst = max(self.worst, float(value))

    def per_slot_reduce(self):
        return self.worst

    def cross_slot_reduce(self, per_slot_metrics):
        return max(per_slot_metrics)


class LinearTrial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr")))
        self.worst = context.wrap_reducer(MaxAbs(), name="max_abs_err", for_training=False)
        self.counter = Counter()
        x = torch.linspace(-1, 1, 64).unsqueeze(1)
        self.data = torch.utils.data.TensorDataset(x, 3 * x + 1)
        print("determined is", det.__file__, flush=True)

    def build_callbacks(self):
        return {"counter": self.counter}

    def build_training_data_loader(self):
        return pytorch.DataLoader(self.data, batch_size=self.context.get_per_slot_batch_size(),
                                  shuffle=True)

    def build_validation_data_loader(self):
        return pytorch.DataLoader(self.data, batch_size=16)

    def train_batch(self, batch, epoch_idx, batch_idx):
        gate = self.context.get_hparam("gate")
        if self.context.current_train_batch() == 10 and self.context.get_initial_batch() == 0:
            print("waiting at batch 10", flush=True)
            while not os.path.exists(gate):
                time.sleep(0.1)
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        pred = self.model(x)
        self.worst.update((pred - y).abs().max())
        return {"val_loss": nn.functional.mse_loss(pred, y)}
