"""Determined's automatic TensorBoard logging of a PyTorchTrial's metrics: each training
window's batch metrics (and reducer results) and each validation's, as `Determined/<name>`
scalars (validation names prefixed `val_`), when the context's TensorBoard logging is on.

A trial's Python without the tensorboard package (a plain dettui install) trains without it:
one warning, no events.
"""

from __future__ import annotations

import logging
from typing import Any

from dettui.pytorch._trial import PyTorchTrialContext

log = logging.getLogger("dettui.pytorch")


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class MetricLog:
    """Writes metrics through `context.get_tensorboard_writer()` (chief only)."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.off = not context.get_enable_tensorboard_logging()

    def _writer(self) -> Any:
        if self.off:
            return None
        try:
            return self.context.get_tensorboard_writer()
        except Exception as exc:  # noqa: BLE001 - TensorBoard is optional: train without it
            log.warning("TensorBoard metrics are not written: %s", exc)
            self.off = True
            return None

    def write(self, kind: str, steps_completed: int, metrics: dict[str, Any],
              batch_metrics: list[dict[str, Any]] | None = None) -> None:
        writer = self._writer()
        if writer is None:
            return
        seen: set[str] = set()
        for i, batch in enumerate(batch_metrics or []):
            step = steps_completed - len(batch_metrics or []) + i
            for name, value in batch.items():
                if _scalar(value):
                    writer.add_scalar("Determined/" + name, value, step)
                seen.add(name)
        for name, value in metrics.items():
            if name in seen:
                continue
            if kind == "val" and not name.startswith("val"):
                name = "val_" + name
            if _scalar(value):
                writer.add_scalar("Determined/" + name, value, steps_completed)
        writer.flush()
