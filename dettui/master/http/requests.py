"""Request bodies, validated with pydantic at the handler edge.

Determined's clients send camelCase, sometimes proto snake_case, explicit nulls and unknown keys;
all are accepted. Wrong types become one 400 naming every bad field.

Numbers are bounded here, where they are parsed, once for every route: an id, a step count or
any other integer is an `Int64` (`Count` if it cannot be negative), within the 64-bit columns
of both stores, and never a boolean (`{"id": true}` is not experiment 1); a float is `Finite`
(no NaN, no infinities, no booleans). The types live with the agent protocol
(`dettui.protocol`), whose bodies use them too. `body.decode_json` has already refused
integers past 64 bits, numbers past a double, lone surrogates and (but in metrics reports)
`NaN`/`Infinity` tokens anywhere in the body; a metrics report's tokens became Determined's
strings, which only metric values accept (`wire.decode_number`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import Field, ValidationError, field_validator

from dettui.errors import InvalidArgument
from dettui.master import offload
from dettui.master.http.body import BIG_BODY, decode_json, read_body
from dettui.master.store import metrics as metric_store
from dettui.protocol import INT64_MAX, Count, Finite, Int64, Message

M = TypeVar("M", bound=Message)
T = TypeVar("T")


Body = Message  # Determined's clients' bodies follow the agent protocol's conventions

__all__ = ["Count", "Finite", "Int64"]  # the bounded numbers of every body (dettui.protocol)


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "body"


async def parse(request: web.Request, model: type[M]) -> M:
    """The request's body as a `model`; a large body is decoded and validated on the CPU
    pool, not on the event loop (a batch of metric reports runs to 64 MiB)."""
    raw = await read_body(request)
    if len(raw) > BIG_BODY:
        return await offload.cpu(_parse_raw, raw, model)
    return _parse_raw(raw, model)


def _parse_raw(raw: bytes, model: type[M]) -> M:
    return parse_obj(decode_json(raw, nan_tokens=model in NAN_TOKENS), model)


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
    parent_id: Int64 | None = None
    project_id: Int64 | None = None
    template: str | None = None
    unmanaged: bool | None = False


class MetricsInner(Body):
    trial_id: Int64
    trial_run_id: Int64
    steps_completed: Count
    report_time: str | None = None
    metrics: dict[str, Any]

    @field_validator("metrics", mode="before")
    @classmethod
    def _capped(cls, metrics: object) -> object:
        """Over the caps of one report: refused before anything else looks at it."""
        if isinstance(metrics, dict):
            metric_store.check_report(metrics)
        return metrics


class ReportMetricsBody(Body):
    group: str
    metrics: MetricsInner


class ReportMetricsBatchBody(Body):
    """dettui's batch of a trial's metric reports (`POST /api/v1/trials/{id}/metrics/batch`)."""

    reports: list[ReportMetricsBody]


# Bodies whose `NaN`/`Infinity` tokens are read as Determined's strings (`decode_json`)
NAN_TOKENS: set[type[Message]] = {ReportMetricsBody, ReportMetricsBatchBody}


class ProgressBody(Body):
    progress: Finite
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
    storage_id: Int64 | None = None

    @field_validator("metadata")
    @classmethod
    def _steps_counted(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        """`steps_completed`, which the store keeps in a column of its own, is a count."""
        steps = metadata.get("steps_completed")
        if isinstance(steps, float) and steps.is_integer():
            steps = int(steps)
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or not 0 <= steps <= INT64_MAX):
            raise ValueError(f"steps_completed must be an integer >= 0, got {steps!r:.40}")
        return metadata


class TaskLogLine(Body):
    timestamp: str | None = None
    task_id: str
    allocation_id: str | None = None
    agent_id: str | None = None
    container_id: str | None = None
    source: str | None = None
    stdtype: str | None = None
    rank_id: Count | None = None
    level: str | None = None  # Determined's v1LogLevel names only (LOG_LEVELS)
    log: str

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str | None) -> str | None:
        """Refused otherwise, as Determined's gateway refuses a name its enum lacks (a shipper
        sending something else has a bug to see, not a line to store under a made-up level)."""
        if value is not None and value not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value


LOG_LEVELS = tuple(f"LOG_LEVEL_{name}" for name in
                   ("UNSPECIFIED", "TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))


class TaskLogsBody(Body):
    logs: list[TaskLogLine]


class PatchExperimentBody(Body):
    name: str | None = None
    description: str | None = None
    labels: list[str] | None = None
    notes: str | None = None


class CreateTrialBody(Body):
    """POST /api/v1/trials: a trial of an unmanaged (detached) experiment."""

    experiment_id: Int64
    hparams: dict[str, Any] | None = None
    unmanaged: bool | None = False


class PutTrialBody(Body):
    create_trial_request: CreateTrialBody
    external_trial_id: str


class StartTrialBody(Body):
    trial_id: Int64 | None = None
    resume: bool | None = False


class PatchTrialBody(Body):
    trial_id: Int64 | None = None
    state: str | None = None


class StartRunBody(Body):
    run_id: Int64
    checkpoint_storage: dict[str, Any] | None = None


class RunMetadataBody(Body):
    """POST /api/v1/runs/{runId}/metadata (`core.train.set_metadata`)."""

    metadata: dict[str, Any]
    run_id: Int64 | None = None


class TrialSourceInfo(Body):
    checkpoint_uuid: str
    trial_id: Int64
    trial_source_info_type: str
    model_id: Int64 | None = None
    model_version: Int64 | None = None


class TrialSourceInfoBody(Body):
    """POST /api/v1/trial-source-info (`core.experimental.report_task_using_checkpoint`)."""

    trial_source_info: TrialSourceInfo


class CheckpointResources(Body):
    resources: dict[str, str] = {}


class CheckpointLeft(Body):
    uuid: str
    resources: CheckpointResources | None = None


class PatchCheckpointsBody(Body):
    """PATCH /api/v1/checkpoints: the files left of each checkpoint (none: deleted)."""

    checkpoints: list[CheckpointLeft]


class CheckpointMetadata(Body):
    uuid: str | None = None
    metadata: dict[str, Any] = {}


class CheckpointMetadataBody(Body):
    """POST /api/v1/checkpoints/{uuid}/metadata (the SDK's add_metadata/remove_metadata):
    Determined's v1Checkpoint, of which only the uuid and metadata are read."""

    checkpoint: CheckpointMetadata


class RemoveCheckpointFilesBody(Body):
    """POST /api/v1/checkpoints/rm (`det checkpoint rm`, the SDK's remove_files)."""

    checkpoint_globs: list[str]
    checkpoint_uuids: list[str]


class MarkDaemonBody(Body):
    """POST /api/v1/allocations/{allocationId}/resources/{resourcesId}/daemon: Determined's
    launchers send no body; its binding's fields, if sent, must agree with the path."""

    allocation_id: str | None = None
    resources_id: str | None = None


class DisableAgentBody(Body):
    """POST /api/v1/agents/{id}/disable: `drain` lets running work finish."""

    drain: bool | None = None


class ContinueExperimentBody(Body):
    """POST /api/v1/experiments/continue (`det e continue`)."""

    id: Int64
    override_config: str | None = None


class DeleteCheckpointsBody(Body):
    """DELETE /api/v1/checkpoints: the checkpoints to take out of storage."""

    checkpoint_uuids: list[str]


class JobUpdate(Body):
    job_id: str
    queue_control: dict[str, Any] | None = None
    priority: Int64 | None = None
    weight: Finite | None = None
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


class AgentUserGroupBody(Body):
    """Determined's v1AgentUserGroup (`det user link-with-agent-user`): all four, or all four
    null to unlink (checked in routes/session.py)."""

    agent_uid: int | None = Field(default=None, strict=True, ge=0, le=2**31 - 1)
    agent_gid: int | None = Field(default=None, strict=True, ge=0, le=2**31 - 1)
    agent_user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]*$", max_length=32)
    agent_group: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]*$",
                                    max_length=32)


class PatchUserBody(Body):
    """PATCH /api/v1/users/{id} (Determined's PatchUser)."""

    agent_user_group: AgentUserGroupBody | None = None

    active: bool | None = None
    admin: bool | None = None
    display_name: str | None = Field(default=None, max_length=256)
    password: str | None = Field(default=None, max_length=1024)
    is_hashed: bool = False
    username: str | None = None
    remote: bool | None = None
