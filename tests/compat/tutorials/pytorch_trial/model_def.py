"""An old-style PyTorchTrial, as Determined's examples wrote them before the Trainer API
(`entrypoint: model_def:MNistTrial`; hyperparameters through the context, the length and the
validation period in the experiment config, `global_batch_size` a hyperparameter), on random
tensors of MNIST's shape."""

from typing import Any

import torch
from determined import pytorch
from torch import nn


def random_mnist(records: int, seed: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(records, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (records,), generator=generator)
    return torch.utils.data.TensorDataset(images, labels)


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        filters1 = self.context.get_hparam("n_filters1")
        filters2 = self.context.get_hparam("n_filters2")
        self.model = self.context.wrap_model(nn.Sequential(
            nn.Conv2d(1, filters1, 3, 1),
            nn.ReLU(),
            nn.Conv2d(filters1, filters2, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(self.context.get_hparam("dropout1")),
            nn.Flatten(),
            nn.Linear(144 * filters2, 128),
            nn.ReLU(),
            nn.Dropout(self.context.get_hparam("dropout2")),
            nn.Linear(128, 10),
            nn.LogSoftmax(dim=1),
        ))
        self.optimizer = self.context.wrap_optimizer(torch.optim.Adadelta(
            self.model.parameters(), lr=self.context.get_hparam("learning_rate")))
        self.loss_fn = nn.NLLLoss()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(random_mnist(64, 0),
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(random_mnist(16, 1),
                                  batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int,
                    batch_idx: int) -> dict[str, torch.Tensor]:
        data, labels = batch
        loss = self.loss_fn(self.model(data), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData) -> dict[str, Any]:
        data, labels = batch
        output = self.model(data)
        pred = output.argmax(dim=1, keepdim=True)
        return {"validation_loss": self.loss_fn(output, labels).item(),
                "accuracy": pred.eq(labels.view_as(pred)).sum().item() / len(data)}
