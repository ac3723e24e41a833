"""Experiment config: YAML + pydantic schema, Determined's defaults and rules. Pure."""

from dettui.config.loader import (
    ExperimentConfig,
    apply_overrides,
    load_config,
    load_config_file,
)

__all__ = ["ExperimentConfig", "apply_overrides", "load_config", "load_config_file"]
