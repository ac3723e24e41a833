"""The agent protocol: every message between the master and its agents, as pydantic models
that both sides build and read (the master validates what agents send with them; agents build
their requests and read their work with them). camelCase on the wire, like Determined's API;
unknown keys are ignored, so either side can be newer.

    agent -> master   POST /api/v1/agents/register               RegisterAgentBody -> Registered
                      POST /api/v1/agents/{id}/heartbeat         HeartbeatBody
                      GET  /api/v1/agents/{id}/work              -> WorkBody (a long-poll)
                      POST /api/v1/agents/{id}/logs              AgentLogsBody
                      POST /api/v1/agents/{id}/allocations/{a}/exit   AllocationExitBody
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel


class Message(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire(self) -> dict[str, Any]:
        """The JSON object this message is on the wire."""
        return self.model_dump(mode="json", by_alias=True)


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


# Numbers as a request body may carry them (issue 29): within the stores' 64-bit columns, never
# a boolean (`{"id": true}` is not 1), floats finite; Seconds a time that a date can show.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Int64 = Annotated[int, BeforeValidator(_not_a_bool), Field(ge=INT64_MIN, le=INT64_MAX)]
Count = Annotated[int, BeforeValidator(_not_a_bool), Field(ge=0, le=INT64_MAX)]
Finite = Annotated[float, BeforeValidator(_not_a_bool), AllowInfNan(False)]
Seconds = Annotated[float, BeforeValidator(_not_a_bool), AllowInfNan(False),
                    Field(ge=0, le=253_402_300_799)]


class AgentSlot(Message):
    id: Int64
    type: str = "cpu"
    uuid: str | None = None
    brand: str = ""


class RegisterAgentBody(Message):
    id: str
    resource_pool: str = "default"
    slots: list[AgentSlot]
    hostname: str = ""
    addresses: list[str] = []
    running_allocations: list[str] = []
    version: str = ""
    no_gpu_reason: str | None = None  # why the agent offers CPU slots (NVML unavailable)
    sandbox: str = ""  # how its trials run: "on, as nobody", "OFF (--no-sandbox)" (agent list)


MAX_HEARTBEAT_SAMPLES = 120  # samples in one heartbeat: the master keeps 120 an agent, and
# an agent sends at most its 30 of an unreachable spell (300,000 took the loop 2.4 s each beat)


class HeartbeatBody(Message):
    running_allocations: list[str] = []
    telemetry: dict[str, Any] | None = None  # the latest TelemetrySample
    # every sample since the last heartbeat, oldest first (counted before any is parsed)
    samples: Annotated[list[Any], Field(max_length=MAX_HEARTBEAT_SAMPLES)] = []


class GpuProcess(Message):
    pid: Int64
    mem_used: Int64 | None = None


class GpuReading(Message):
    index: Int64
    name: str = ""
    util: Finite | None = None  # percent
    mem_used: Int64 | None = None  # bytes
    mem_total: Int64 | None = None
    temperature: Finite | None = None  # Celsius
    power: Finite | None = None  # watts
    processes: list[GpuProcess] | None = None  # None: NVML cannot list them


MAX_CPU_PERCENT = 100.0 * 65536  # percent of one core: 65,536 cores busy


class AllocationUsage(Message):
    """What an allocation's processes on one agent use (the agent's part of it)."""

    cpu_percent: Annotated[Finite, Field(ge=0, le=MAX_CPU_PERCENT)] | None = None  # of a core
    rss: Count | None = None  # bytes, the whole process tree
    gpu_util: Annotated[Finite, Field(ge=0, le=100)] | None = None  # mean over its GPUs
    gpu_memory: Count | None = None  # bytes its processes hold on its GPUs


MAX_SAMPLE_ALLOCATIONS = 1024  # allocations one telemetry sample may report
MAX_ALLOCATION_ID = 255  # characters ("<experiment>.<uuid>.<run>" is about 45)


class TelemetrySample(Message):
    """One reading of an agent's machine; `model_dump(by_alias=True)` is the API's shape."""

    time: Finite  # seconds since the epoch, the agent's clock (not shown as a date)
    cpu_percent: Finite | None = None  # of the whole machine
    mem_used: Int64 | None = None  # bytes
    mem_total: Int64 | None = None
    gpus: list[GpuReading] = []
    allocations: Annotated[dict[Annotated[str, Field(max_length=MAX_ALLOCATION_ID)],
                                AllocationUsage],
                           Field(max_length=MAX_SAMPLE_ALLOCATIONS)] = {}


class AgentLogLine(Message):
    allocation_id: str
    seq: Count | None = None  # its number within the agent's part: sent twice, stored once
    timestamp: Seconds
    rank_id: Count | None = None
    stdtype: str = "stdout"
    level: str | None = None
    log: str


class AgentLogsBody(Message):
    logs: list[AgentLogLine]


class AllocationExitBody(Message):
    exit_code: Int64 | None = None
    reason: str = ""
    message: str = ""


class Registered(Message):
    """The master's answer to a registration."""

    agent_id: str
    cluster_id: str = ""
    heartbeat_seconds: float = 2.0
    agent_timeout_seconds: float = 30.0


class AgentUser(Message):
    """The Unix user a trial runs as on the agent: its owner's linked agent user (Determined's
    `agentUserGroup`, set by `det user link-with-agent-user`). A name is looked up on the
    agent's machine; an id is taken as it is. None on StartWork: the agent's default trial
    user (`dettui agent --trial-user`)."""

    uid: int | None = None
    gid: int | None = None
    user: str | None = None
    group: str | None = None


class StartWork(Message):
    """Start this agent's part of an allocation (node rank = its part's index)."""

    kind: Literal["start"] = "start"
    allocation_id: str
    task_id: str
    trial_id: int
    experiment_id: int
    run_id: int
    slots: list[int]
    node_rank: int = 0
    cuda_devices: list[int] = []
    entrypoint: str | list[str] | None = None
    env: dict[str, str] = {}
    session_token: str = ""
    agent_user: AgentUser | None = None  # the owner's linked Unix user; None: the default
    owner_id: int | None = None  # the experiment's owner (an unlinked owner's own uid)
    checkpoint_root: str | None = None  # the master's default checkpoint storage (trusted)
    fork_server: bool = True  # the pool and the experiment allow a forked start
    fork_off: str = ""  # when not, which of them says so (the trial's start line)


class KillWork(Message):
    """End every process of an allocation's part on this agent."""

    kind: Literal["kill"] = "kill"
    allocation_id: str
    reason: str = "killed"


Work = Annotated[StartWork | KillWork, Field(discriminator="kind")]


class WorkBody(Message):
    """The answer to the work long-poll: what to start and what to kill, in order."""

    work: list[Work] = []
