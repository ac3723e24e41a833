"""The experiment config schema (Determined 0.38 expconf), as pydantic models.

`extra="forbid"` everywhere: unknown keys are errors, reported with the closest known key.
Defaults here are Determined's (SEMANTICS §4.1); `ExperimentConfig.to_expconf()` emits them all.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dettui.metric import SMALLER_IS_BETTER


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class Length(Strict):
    batches: int | None = Field(default=None, ge=0)
    records: int | None = Field(default=None, ge=0)
    epochs: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _exactly_one(self) -> Length:
        if sum(v is not None for v in (self.batches, self.records, self.epochs)) != 1:
            raise ValueError("must have exactly one of batches, records or epochs")
        return self

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


def priority_value(value: object) -> int:
    """The one rule for a job's priority, in a config and over the API: an integer from 1 to
    99, lower being more urgent (a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99:
        raise ValueError("must be an integer from 1 to 99")
    return value


def weight_value(value: object) -> float:
    """The one rule for a job's fair-share weight: a positive, finite number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 < value < math.inf:
        raise ValueError("must be a positive number")
    return float(value)


class Resources(Strict):
    slots_per_trial: int = Field(default=1, ge=0)
    weight: float = 1.0
    native_parallel: bool = False
    resource_pool: str = ""
    priority: int | None = None
    max_slots: int | None = Field(default=None, ge=0)
    shm_size: int | str | None = None
    agent_label: str | None = None
    is_single_node: bool | None = None
    devices: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, v: Any) -> Any:
        return None if v is None else priority_value(v)

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, v: Any) -> Any:
        return weight_value(v)


SearcherName = Literal["single", "random", "grid", "adaptive_asha", "async_halving"]


class Searcher(Strict):
    name: str
    metric: str
    smaller_is_better: bool = SMALLER_IS_BETTER
    max_trials: int | None = Field(default=None, ge=1)
    max_length: Length | int | None = None
    max_concurrent_trials: int = Field(default=16, ge=0)
    divisor: float = Field(default=4.0, gt=1)
    max_rungs: int = Field(default=5, ge=1)
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    bracket_rungs: list[int] = Field(default_factory=list)
    num_rungs: int | None = Field(default=None, ge=1)
    time_metric: str | None = None
    max_time: int | None = Field(default=None, ge=1)
    stop_once: bool = False
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None

    @field_validator("max_length", mode="before")
    @classmethod
    def _length(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            raise ValueError("must be >= 1")
        return v


StorageType = Literal["shared_fs", "directory", "s3", "gcs", "azure"]


class CheckpointStorage(Strict):
    type: StorageType
    host_path: str | None = None
    storage_path: str | None = None
    container_path: str | None = None
    propagation: str = "rprivate"
    bucket: str | None = None
    prefix: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None
    credentials_file: str | None = None
    container: str | None = None
    connection_string: str | None = None
    account_url: str | None = None
    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


class BindMount(Strict):
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"


def environment_item_problem(item: str) -> str | None:
    """What is wrong with one `environment_variables` item (`NAME=VALUE`), or None. A NUL
    cannot be in an environment at all (it would cut the value short), nor a variable without
    a name."""
    shown = item if len(item) <= 40 else item[:39] + "…"
    if "\0" in item:
        return f"{shown!r} holds a NUL character, which no environment variable can"
    if item.startswith("="):
        return f"{shown!r} has no name: write NAME=VALUE"
    return None


class Environment(Strict):
    image: str | dict[str, str] | None = None
    environment_variables: list[str] | dict[str, list[str]] = Field(default_factory=list)
    ports: dict[str, int] = Field(default_factory=dict)
    proxy_ports: list[dict[str, Any]] = Field(default_factory=list)
    force_pull_image: bool = False
    registry_auth: dict[str, Any] | None = None
    pod_spec: dict[str, Any] | None = None
    add_capabilities: list[str] = Field(default_factory=list)
    drop_capabilities: list[str] = Field(default_factory=list)

    @field_validator("environment_variables")
    @classmethod
    def _name_equals_value(cls, value: list[str] | dict[str, list[str]]
                           ) -> list[str] | dict[str, list[str]]:
        lists = list(value.values()) if isinstance(value, dict) else [value]
        problems = [p for items in lists for item in items
                    if (p := environment_item_problem(item)) is not None]
        if problems:
            more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            raise ValueError("; ".join(problems[:5]) + more)
        return value


class Optimizations(Strict):
    aggregation_frequency: int = Field(default=1, ge=1)
    average_aggregated_gradients: bool = True
    average_training_metrics: bool = True
    gradient_compression: bool = False
    auto_tune_tensor_fusion: bool = False
    mixed_precision: str = "O0"
    tensor_fusion_threshold: int = 64
    tensor_fusion_cycle_time: int = 1
    grad_updates_size_file: str | None = None


class Profiling(Strict):
    enabled: bool = False
    begin_on_batch: int = Field(default=0, ge=0)
    end_after_batch: int | None = None
    sync_timings: bool = True


class Reproducibility(Strict):
    experiment_seed: int | None = Field(default=None, ge=0, le=2**32 - 1)


class LogPolicy(Strict):
    name: str | None = None
    pattern: str | None = None
    action: Any = None


DEFAULT_LOG_POLICIES = [
    {"name": "CUDA OOM", "pattern": ".*CUDA out of memory.*"},
    {"name": "ECC Error", "pattern": ".*uncorrectable ECC error encountered.*"},
]


class ExperimentSchema(Strict):
    name: str | None = None
    description: str | None = None
    labels: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    entrypoint: str | list[str] | None = None
    resources: Resources = Field(default_factory=Resources)
    searcher: Searcher
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    max_restarts: int = Field(default=5, ge=0)
    checkpoint_storage: CheckpointStorage | None = None
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    environment: Environment = Field(default_factory=Environment)
    records_per_epoch: int = Field(default=0, ge=0)
    min_validation_period: Length = Field(default_factory=lambda: Length(batches=0))
    min_checkpoint_period: Length = Field(default_factory=lambda: Length(batches=0))
    scheduling_unit: int = Field(default=100, ge=1)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    perform_initial_validation: bool = False
    debug: bool = False
    preemption_timeout: int = Field(default=3600, ge=0)
    project: str = ""
    workspace: str = ""
    reproducibility: Reproducibility = Field(default_factory=Reproducibility)
    optimizations: Optimizations = Field(default_factory=Optimizations)
    profiling: Profiling = Field(default_factory=Profiling)
    log_policies: list[LogPolicy] | None = None
    tensorboard_storage: dict[str, Any] | None = None
    integrations: dict[str, Any] | None = None
