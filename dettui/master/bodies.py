"""Request bodies, validated with pydantic at the handler edge.

Determined's clients send camelCase, sometimes proto snake_case, explicit nulls and unknown keys;
all are accepted. Wrong types become one 400 naming every bad field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from dettui.errors import InvalidArgument
from dettui.master.middleware import read_json

M = TypeVar("M", bound="Body")
T = TypeVar("T")


class Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "body"


async def parse(request: web.Request, model: type[M]) -> M:
    data = await read_json(request)
    return parse_obj(data, model)


def checked(rule: Callable[[object], T], value: object, where: str) -> T:
    """`rule(value)` (a config rule such as `schema.priority_value`), its ValueError a 400
    naming `where`: the API and the config share one rule per field."""
    try:
        return rule(value)
    except ValueError as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def parse_obj(data: object, model: type[M]) -> M:
    if not isinstance(data, dict):
        raise InvalidArgument(f"request body must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InvalidArgument(f"invalid request body: {problems}") from exc


class LoginBody(Body):
    username: str
    password: str = ""
    is_hashed: bool = False


class CreateExperimentBody(Body):
    config: str
    model_definition: list[Any] | None = None
    activate: bool | None = True
    validate_only: bool | None = False
    parent_id: int | None = None
    project_id: int | None = None
    template: str | None = None
    unmanaged: bool | None = False


class MetricsInner(Body):
    trial_id: int
    trial_run_id: int
    steps_completed: int
    report_time: str | None = None
    metrics: dict[str, Any]


class ReportMetricsBody(Body):
    group: str
    metrics: MetricsInner


class ProgressBody(Body):
    progress: float
    is_raw: bool | None = None


class EarlyExitBody(Body):
    reason: str


class RunnerMetadataBody(Body):
    state: str


class CheckpointBody(Body):
    uuid: str
    task_id: str
    allocation_id: str | None = None
    report_time: str | None = None
    resources: dict[str, str] = {}
    metadata: dict[str, Any] = {}
    state: str | None = None
    training: dict[str, Any] | None = None
    storage_id: int | None = None


class TaskLogLine(Body):
    timestamp: str | None = None
    task_id: str
    allocation_id: str | None = None
    agent_id: str | None = None
    container_id: str | None = None
    source: str | None = None
    stdtype: str | None = None
    rank_id: int | None = None
    level: str | None = None
    log: str


class TaskLogsBody(Body):
    logs: list[TaskLogLine]


class AgentSlot(Body):
    id: int
    type: str = "cpu"
    uuid: str | None = None
    brand: str = ""


class RegisterAgentBody(Body):
    id: str
    resource_pool: str = "default"
    slots: list[AgentSlot]
    hostname: str = ""
    addresses: list[str] = []
    running_allocations: list[str] = []
    version: str = ""
    no_gpu_reason: str | None = None  # why the agent offers CPU slots (NVML unavailable)


class HeartbeatBody(Body):
    running_allocations: list[str] = []
    telemetry: dict[str, Any] | None = None  # the latest TelemetrySample
    samples: list[Any] = []  # every sample since the last heartbeat, oldest first


class GpuProcess(Body):
    pid: int
    mem_used: int | None = None


class GpuReading(Body):
    index: int
    name: str = ""
    util: float | None = None  # percent
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    temperature: float | None = None  # Celsius
    power: float | None = None  # watts
    processes: list[GpuProcess] | None = None  # None: NVML cannot list them


class AllocationUsage(Body):
    cpu_percent: float | None = None  # of one core: 250.0 is two and a half cores busy
    rss: int | None = None  # bytes, the whole process tree


class TelemetrySample(Body):
    """One reading of an agent's machine; `model_dump(by_alias=True)` is the API's shape."""

    time: float  # seconds since the epoch, the agent's clock
    cpu_percent: float | None = None  # of the whole machine
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    gpus: list[GpuReading] = []
    allocations: dict[str, AllocationUsage] = {}


class AgentLogLine(Body):
    allocation_id: str
    seq: int | None = None  # its number within the agent's part: sent twice, stored once
    timestamp: float
    rank_id: int | None = None
    stdtype: str = "stdout"
    level: str | None = None
    log: str


class AgentLogsBody(Body):
    logs: list[AgentLogLine]


class AllocationExitBody(Body):
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


class PatchExperimentBody(Body):
    name: str | None = None
    description: str | None = None
    labels: list[str] | None = None
    notes: str | None = None


class CreateTrialBody(Body):
    """POST /api/v1/trials: a trial of an unmanaged (detached) experiment."""

    experiment_id: int
    hparams: dict[str, Any] | None = None
    unmanaged: bool | None = False


class PutTrialBody(Body):
    create_trial_request: CreateTrialBody
    external_trial_id: str


class StartTrialBody(Body):
    trial_id: int | None = None
    resume: bool | None = False


class PatchTrialBody(Body):
    trial_id: int | None = None
    state: str | None = None


class StartRunBody(Body):
    run_id: int
    checkpoint_storage: dict[str, Any] | None = None


class CheckpointResources(Body):
    resources: dict[str, str] = {}


class CheckpointLeft(Body):
    uuid: str
    resources: CheckpointResources | None = None


class PatchCheckpointsBody(Body):
    """PATCH /api/v1/checkpoints: the files left of each checkpoint (none: deleted)."""

    checkpoints: list[CheckpointLeft]


class JobUpdate(Body):
    job_id: str
    queue_control: dict[str, Any] | None = None
    priority: int | None = None
    weight: float | None = None
    resource_pool: str | None = None
    ahead_of: str | None = None
    behind_of: str | None = None


class UpdateJobQueueBody(Body):
    updates: list[JobUpdate]


class PasswordBody(Body):
    password: str


class AgentCredentialBody(Body):
    description: str = Field(default="", max_length=200)


class NewUser(Body):
    username: str = Field(max_length=128)
    admin: bool | None = False
    active: bool | None = True
    display_name: str | None = Field(default=None, max_length=256)
    remote: bool | None = False


class PostUserBody(Body):
    """POST /api/v1/users (Determined's PostUserRequest)."""

    user: NewUser
    password: str | None = Field(default=None, max_length=1024)
    is_hashed: bool = False


class PatchUserBody(Body):
    """PATCH /api/v1/users/{id} (Determined's PatchUser)."""

    active: bool | None = None
    admin: bool | None = None
    display_name: str | None = Field(default=None, max_length=256)
    password: str | None = Field(default=None, max_length=1024)
    is_hashed: bool = False
    username: str | None = None
    remote: bool | None = None
