"""`python -m dettui.launch.harness module:TrialClass [--config EXP.yaml] [--hparams JSON]`.

Runs a PyTorchTrial: on a cluster (one process per slot, under the torch_distributed
launcher) with the trial's hyperparameters and config from the DET_* environment; off a cluster
with the config file given (its constant hyperparameters, or --hparams). Trial code written
for Determined (`from determined import pytorch`) runs unchanged when the real `determined`
package is not installed: its names resolve to dettui's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

EXIT_USAGE = 2
EXIT_TRIAL_ERROR = 1


class HarnessError(Exception):
    """A trial that cannot be loaded or configured; the message says what to fix."""


def alias_determined() -> bool:
    """Make `determined`, `determined.core` and `determined.pytorch` resolve to dettui's,
    unless the real package is installed. Returns True when the alias is in place."""
    from dettui.launch import alias

    return alias.install()


def load_trial_class(spec: str) -> type[Any]:
    from dettui.pytorch import PyTorchTrial

    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise HarnessError(f"trial '{spec}' must be module:Class, e.g. model_def:MyTrial")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    alias_determined()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise HarnessError(f"trial module '{module_name}' not found in {os.getcwd()}") \
                from exc
        raise
    trial = getattr(module, class_name, None)
    if trial is None:
        raise HarnessError(f"module '{module_name}' has no '{class_name}'; it defines "
                           f"{sorted(n for n in vars(module) if not n.startswith('_'))}")
    if not (isinstance(trial, type) and issubclass(trial, PyTorchTrial)):
        raise HarnessError(f"{spec} is not a subclass of dettui.pytorch.PyTorchTrial "
                           "(or determined.pytorch.PyTorchTrial)")
    return trial


def _local_config(path: str | None, hparams_json: str | None) -> tuple[dict[str, Any],
                                                                       dict[str, Any]]:
    """Off a cluster: the experiment config file (defaults filled) and its hyperparameters."""
    config: dict[str, Any] = {}
    if path:
        from dettui.config.loader import load_config_file
        from dettui.errors import ConfigError

        try:
            config = load_config_file(Path(path)).to_expconf()
        except ConfigError as exc:
            raise HarnessError(str(exc)) from exc
    hparams: dict[str, Any] = {}
    for name, spec in (config.get("hyperparameters") or {}).items():
        if isinstance(spec, dict) and spec.get("type") == "const":
            hparams[name] = spec.get("val")
        elif not isinstance(spec, dict):
            hparams[name] = spec
    if hparams_json:
        try:
            given = json.loads(hparams_json)
        except json.JSONDecodeError as exc:
            raise HarnessError(f"--hparams is not valid JSON: {exc}") from exc
        if not isinstance(given, dict):
            raise HarnessError("--hparams must be a JSON object")
        hparams.update(given)
    missing = [n for n, s in (config.get("hyperparameters") or {}).items()
               if n not in hparams and isinstance(s, dict)]
    if missing:
        raise HarnessError(f"hyperparameters {missing} are searched over; give values with "
                           "--hparams '{\"name\": value}' to run off the cluster")
    return config, hparams


def run(trial_spec: str, config_path: str | None = None, hparams_json: str | None = None) -> int:
    """Determined's `exec/harness.py` for a PyTorchTrial: `pytorch.init`, the trial, then
    `Trainer.fit` with the config's periods, policy and initial validation, its length the
    searcher's (`searcher.max_length`, or ASHA's `max_time` in `time_metric`)."""
    from dettui import core

    trial_class = load_trial_class(trial_spec)
    info = core.get_cluster_info()
    if info is not None:
        config, hparams = info.trial.config, info.trial.hparams
    else:
        config, hparams = _local_config(config_path, hparams_json)
    if info is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        try:
            _fit(trial_class, config, hparams, info,
                 core.DistributedContext.from_torch_distributed())
        finally:
            dist.destroy_process_group()
    else:
        _fit(trial_class, config, hparams, info, None)
    return 0


def _fit(trial_class: type[Any], config: dict[str, Any], hparams: dict[str, Any], info: Any,
         distributed: Any) -> None:
    from dettui import pytorch
    from dettui.pytorch._trainer import _legacy_max_length

    gbs = hparams.get("global_batch_size")
    gbs = int(gbs) if gbs else None
    try:  # before the trial is built: a config error is the first thing said
        periods = {what: pytorch.TrainUnit._from_values(
            **(config.get(key) or {"batches": 0}), global_batch_size=gbs)
            for what, key in (("checkpoint_period", "min_checkpoint_period"),
                              ("validation_period", "min_validation_period"))}
        max_length = None if info is not None else _legacy_max_length(config, hparams)
    except (TypeError, ValueError) as exc:
        raise HarnessError(str(exc)) from exc
    with pytorch.init(hparams=hparams, exp_conf=config, distributed=distributed) as context:
        context._set_is_pre_trainer()
        trial = trial_class(context)
        pytorch.Trainer(trial, context).fit(
            max_length=max_length, reporting_period=pytorch.Batch(
                int(config.get("scheduling_unit") or 100)),
            checkpoint_policy=str(config.get("checkpoint_policy") or "best"),
            latest_checkpoint=info.latest_checkpoint if info is not None else None,
            step_zero_validation=bool(config.get("perform_initial_validation")),
            **periods)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dettui.launch.harness",
                                     description="Run a PyTorchTrial class.")
    parser.add_argument("trial", help="module:Class, e.g. model_def:MyTrial")
    parser.add_argument("--config", help="experiment config (off the cluster)")
    parser.add_argument("--hparams", help="hyperparameter values as JSON (off the cluster)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return run(args.trial, args.config, args.hparams)
    except HarnessError as exc:
        print(f"harness: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
