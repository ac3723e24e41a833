"""PyTorchCallback: Determined's hooks into the training loop, called by the harness."""

from __future__ import annotations

from typing import Any


class PyTorchCallback:
    """Override the hooks you need; return instances from `PyTorchTrial.build_callbacks()`
    (a dict by name: the name keys the callback's `state_dict` in checkpoints)."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before training starts, after the trial and a checkpoint (if any) are loaded."""

    def on_trial_shutdown(self) -> None:
        """When training ends, however it ends."""

    def on_training_start(self) -> None:
        """Right before the first batch of this run."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of an epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of an epoch."""

    def on_training_workload_end(self, avg_metrics: dict[str, Any],
                                 batch_metrics: list[dict[str, Any]]) -> None:
        """After training metrics are reported (every reporting period)."""

    def on_validation_start(self) -> None:
        """Before validation."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch."""

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        """After the last validation batch, with every batch's metrics of this rank."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After validation, with the reduced metrics."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """With the loaded checkpoint state, before it is applied."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """With the state about to be saved (add entries to it here)."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint's files are written."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated twin of `on_checkpoint_write_end`."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is stored and reported."""

    def state_dict(self) -> dict[str, Any]:
        """What to keep in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from `state_dict()`'s output."""
