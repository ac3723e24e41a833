"""The experiment config schema (Determined 0.38 expconf), as pydantic models.

`extra="forbid"` everywhere: unknown keys are errors, reported with the closest known key.
Defaults here are Determined's (SEMANTICS §4.1); `ExperimentConfig.to_expconf()` emits them all.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dettui.config import hyperparameters as hp
from dettui.metric import SMALLER_IS_BETTER


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


INT64_MAX = 2**63 - 1  # Determined's master holds these counts in Go ints


class Length(Strict):
    batches: int | None = Field(default=None, ge=0, le=INT64_MAX)
    records: int | None = Field(default=None, ge=0, le=INT64_MAX)
    epochs: int | None = Field(default=None, ge=0, le=INT64_MAX)

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

# What an ASHA search may plan, so that a preview or an experiment's searcher stays small. Each
# bracket holds a list per rung and adaptive_asha has at most one bracket per rung count, so the
# work is at most MAX_RUNGS²; Determined's examples use 5 rungs or fewer.
MAX_RUNGS = 64  # rungs in one bracket, after max_time and max_trials have limited them
MAX_BRACKETS = MAX_RUNGS  # entries in bracket_rungs
MAX_DIVISOR_GROWTH = 1e300  # divisor^(rungs - 1) must stay a finite float
MAX_TRIALS_AT_ONCE = 1000  # trials a searcher may start before any has reported
_EPS = 1e-9  # ⌊log T / log d⌋ computed in floats must not lose an exact power (log 64/log 4)


def rungs_within(budget: int, divisor: float) -> int:
    """How many rungs a budget of `budget` units (or trials) holds: ⌊log_d budget⌋ + 1."""
    return int(math.log(max(budget, 1)) / math.log(divisor) + _EPS) + 1


def asha_top_rungs(max_rungs: int, max_time: int | None, max_trials: int | None,
                   divisor: float) -> int:
    """The rungs of adaptive_asha's longest bracket (Determined's rule): `max_rungs`, or fewer
    when `max_time` or `max_trials` cannot fill that many rungs at this `divisor`. Computed
    without building anything, so a hostile `max_rungs` costs nothing here."""
    top = max_rungs
    for budget in (max_time, max_trials):
        if budget is not None:
            top = min(top, rungs_within(budget, divisor))
    return top


class Searcher(Strict):
    name: str
    metric: str
    smaller_is_better: bool = SMALLER_IS_BETTER
    max_trials: int | None = Field(default=None, ge=1, le=INT64_MAX)
    max_length: Length | int | None = None
    max_concurrent_trials: int = Field(default=16, ge=0, le=INT64_MAX)
    divisor: float = Field(default=4.0, gt=1, allow_inf_nan=False)
    max_rungs: int = Field(default=5, ge=1, le=INT64_MAX)
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    bracket_rungs: list[int] = Field(default_factory=list)
    num_rungs: int | None = Field(default=None, ge=1, le=MAX_RUNGS)
    time_metric: str | None = None
    max_time: int | None = Field(default=None, ge=1, le=INT64_MAX)
    stop_once: bool = False
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None

    @field_validator("max_length", mode="before")
    @classmethod
    def _length(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and not 1 <= v <= INT64_MAX:
            raise ValueError(f"must be from 1 to {INT64_MAX}")
        return v

    @field_validator("bracket_rungs", mode="after")
    @classmethod
    def _bracket_rungs(cls, v: list[int]) -> list[int]:
        if len(v) > MAX_BRACKETS:
            raise ValueError(f"has {len(v)} brackets; at most {MAX_BRACKETS} are allowed")
        if any(not 1 <= r <= MAX_RUNGS for r in v):
            raise ValueError(f"each entry must be from 1 to {MAX_RUNGS} rungs")
        return v

    def time_budget(self) -> int | None:
        """ASHA's max time: `max_time` with a `time_metric`, or a legacy `max_length`."""
        if self.time_metric and self.max_time:
            return self.max_time
        if isinstance(self.max_length, Length):
            return next(iter(self.max_length.as_dict().values()))
        return None

    @model_validator(mode="after")
    def _bounded(self) -> Searcher:
        """Refuse a search whose plan alone would be huge, naming the keys and the limit."""
        if self.name == "adaptive_asha":
            self._check_adaptive_rungs()
        if self.name in ("adaptive_asha", "async_halving"):
            rungs = max(self.bracket_rungs or [self.num_rungs or 1])
            if self.name == "adaptive_asha" and not self.bracket_rungs:
                rungs = asha_top_rungs(self.max_rungs, self.time_budget(), self.max_trials,
                                       self.divisor)
            if (rungs - 1) * math.log(self.divisor) > math.log(MAX_DIVISOR_GROWTH):
                raise ValueError(f"divisor {self.divisor} to the power of {rungs - 1} (rungs "
                                 f"- 1) exceeds {MAX_DIVISOR_GROWTH:g}: lower divisor or the "
                                 "rungs")
        if self.name in ("random", "adaptive_asha", "async_halving") \
                and self.max_trials is not None:
            at_once = min(self.max_concurrent_trials or self.max_trials, self.max_trials)
            if at_once > MAX_TRIALS_AT_ONCE:
                raise ValueError(
                    f"max_trials {self.max_trials} with max_concurrent_trials "
                    f"{self.max_concurrent_trials} would start {at_once} trials at once; at most "
                    f"{MAX_TRIALS_AT_ONCE} may start at once: set max_concurrent_trials from 1 to "
                    f"{MAX_TRIALS_AT_ONCE}")
        return self

    def _check_adaptive_rungs(self) -> None:
        if self.bracket_rungs:
            return  # each entry is already at most MAX_RUNGS
        top = asha_top_rungs(self.max_rungs, self.time_budget(), self.max_trials, self.divisor)
        if top > MAX_RUNGS:
            raise ValueError(
                f"max_rungs {self.max_rungs} with divisor {self.divisor} gives brackets of "
                f"{top} rungs; at most {MAX_RUNGS} are allowed: set max_rungs to {MAX_RUNGS} "
                f"or less, or a larger divisor")


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
    # dettui's: false starts every trial of the experiment as a fresh interpreter, never
    # forked from the agent's fork server (its Python state is then exactly a new process's)
    fork_server: bool = True

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

    @model_validator(mode="after")
    def _grid_at_once(self) -> ExperimentSchema:
        """A grid search starts at most MAX_TRIALS_AT_ONCE trials at once; its size comes from
        the hyperparameters (checked only once they are a valid grid of at most MAX_GRID)."""
        if self.searcher.name != "grid":
            return self
        hps = hp.normalize(self.hyperparameters)
        if hp.problems(hps, grid=True):
            return self  # reported by the config's own hyperparameter checks
        size = hp.grid_size(hps)
        at_once = min(self.searcher.max_concurrent_trials or size, size)
        if at_once > MAX_TRIALS_AT_ONCE:
            raise ValueError(
                f"a grid of {size} points with max_concurrent_trials "
                f"{self.searcher.max_concurrent_trials} would start {at_once} trials at once; "
                f"at most {MAX_TRIALS_AT_ONCE} may start at once: set max_concurrent_trials "
                f"from 1 to {MAX_TRIALS_AT_ONCE}")
        return self
