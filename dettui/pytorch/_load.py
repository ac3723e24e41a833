"""Determined's `pytorch.load_trial_from_checkpoint_path`: a PyTorchTrial restored from the
files of one of its checkpoints, outside any training loop.

The trial class is imported from the checkpoint's `code/` (its model definition, as
Determined's checkpoints hold it), else from where this runs, or is passed as `trial_class`.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from dettui import core
from dettui.core._context import dummy_context
from dettui.launch.import_path import import_from_path
from dettui.pytorch._controller import STATE_FILE, _load_state
from dettui.pytorch._trial import PyTorchTrial, PyTorchTrialContext


class CheckpointLoadContext(PyTorchTrialContext):
    """A PyTorchTrialContext for building a trial outside training (off any cluster)."""

    def __init__(self, hparams: dict[str, Any] | None = None,
                 exp_conf: dict[str, Any] | None = None) -> None:
        super().__init__(dummy_context(core.DistributedContext()), dict(hparams or {}),
                         dict(exp_conf or {}))


def load_trial_from_checkpoint_path(path: str | Path,
                                    trial_class: type[PyTorchTrial] | None = None,
                                    trial_kwargs: dict[str, Any] | None = None,
                                    torch_load_kwargs: dict[str, Any] | None = None,
                                    ) -> PyTorchTrial:
    """The trial of the checkpoint in `path` (already downloaded), its models, optimizers,
    LR schedulers and scaler in the state they were saved in."""
    ckpt = Path(path)
    load_data_path = ckpt / "load_data.json"
    if not load_data_path.is_file():
        raise ValueError(f"{ckpt} holds no load_data.json: not a checkpoint of a PyTorchTrial "
                         "trained by dettui's harness")
    load_data = json.loads(load_data_path.read_text())
    if trial_class is None:
        trial_class = _trial_class(load_data.get("trial_cls_spec"), ckpt / "code")
    context = CheckpointLoadContext(load_data.get("hparams"), load_data.get("experiment_config"))
    trial = trial_class(context, **(trial_kwargs or {}))  # type: ignore[call-arg]
    kwargs = {"map_location": "cpu", "weights_only": False, **(torch_load_kwargs or {})}
    state = torch.load(ckpt / STATE_FILE, **kwargs)
    _load_state(context, state, str(ckpt))
    return trial


def _trial_class(spec: object, code: Path) -> type[PyTorchTrial]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError("the checkpoint does not name its trial class: pass trial_class=")
    module, _, qualname = spec.partition(":")
    try:
        found: Any = _import(module, code)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"Automatic import logic failed to import Trial class as {spec}. "
                         "You will need to provide your Trial class via the trial_class "
                         "argument instead.") from exc
    if not (isinstance(found, type) and issubclass(found, PyTorchTrial)):
        raise ValueError(f"{spec} is not a PyTorchTrial")
    return found


def _import(module: str, code: Path) -> Any:
    """`module` from the checkpoint's code when the code holds it (a fresh import, as
    Determined's `import_from_path`), else as this process finds it."""
    top_path = code / module.split(".")[0]
    if module == "__main__" or not (top_path.with_suffix(".py").is_file() or top_path.is_dir()):
        return sys.modules["__main__"] if module == "__main__" else \
            importlib.import_module(module)

    with import_from_path(code):
        return importlib.import_module(module)
