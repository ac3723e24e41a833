"""Frozen records the store returns, one per table, built from sqlite3.Row."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, TypeVar

from dettui.config.schema import ExperimentSchema
from dettui.jsonfast import loads
from dettui.models import AllocationState, CheckpointState, ExperimentState, TrialState

T = TypeVar("T")


IN_CHUNK = 500  # values bound in one `IN (...)`: far within SQLite's and asyncpg's 32,767


def in_chunks(values: Sequence[T]) -> Iterator[tuple[Sequence[T], str]]:
    """`values` in slices for `... IN ({marks})` statements, each with its `?,?,...`: a read of
    any number of ids stays within the bound-parameter limit."""
    for i in range(0, len(values), IN_CHUNK):
        chunk = values[i:i + IN_CHUNK]
        yield chunk, ",".join("?" * len(chunk))


def columns(names: str, alias: str = "") -> str:
    """`names` (space-separated) as a SELECT list, each prefixed with `alias.` if given: every
    SELECT names its columns, so no query reads a column it does not need."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + n for n in names.split())


@dataclass(frozen=True)
class AgentLink:
    """A user's linked agent user (Determined's agentUserGroup): its trials' Unix user."""

    uid: int
    gid: int
    user: str
    group: str


@dataclass(frozen=True)
class User:
    COLUMNS: ClassVar[str] = ("id username password_hash admin active display_name "
                              "agent_uid agent_gid agent_user agent_group")

    id: int
    username: str
    password_hash: str
    admin: bool
    active: bool
    display_name: str | None
    agent: AgentLink | None = None  # None: unlinked

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> User:
        agent = None
        if r["agent_uid"] is not None:
            agent = AgentLink(int(r["agent_uid"]), int(r["agent_gid"]), r["agent_user"],
                              r["agent_group"])
        return cls(r["id"], r["username"], r["password_hash"], bool(r["admin"]),
                   bool(r["active"]), r["display_name"], agent)


@dataclass(frozen=True)
class Experiment:
    id: int
    name: str
    description: str | None
    labels: list[str]
    state: ExperimentState
    archived: bool
    owner_id: int
    username: str
    config: dict[str, Any]
    original_config: str
    searcher_type: str
    job_id: str
    resource_pool: str
    priority: int
    weight: float
    max_slots: int | None
    queue_position: float
    start_time: float
    end_time: float | None
    progress: float | None
    unmanaged: bool
    num_trials: int
    external_id: str | None = None  # set for detached experiments created by external id
    config_text: str = field(default="{}", repr=False, compare=False)  # `config` as stored
    best: float | None = None  # the best searcher metric of its validations (`metrics.best`)
    best_trial_id: int | None = None  # the trial that reported it
    checkpoint_size: int = 0  # bytes of its checkpoints that hold files (store.checkpoints)
    checkpoint_count: int = 0  # ...and how many they are
    warnings: list[str] = field(default_factory=list)  # search sanity (searcher/sanity.py)

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Experiment:
        return cls(
            id=r["id"], name=r["name"], description=r["description"],
            labels=loads(r["labels"]), state=ExperimentState(r["state"]),
            archived=bool(r["archived"]), owner_id=r["owner_id"], username=r["username"],
            config=_with_columns(loads(r["config"]), r),
            original_config=r["original_config"],
            searcher_type=r["searcher_type"], job_id=r["job_id"],
            resource_pool=r["resource_pool"], priority=r["priority"], weight=r["weight"],
            max_slots=r["max_slots"], queue_position=r["queue_position"],
            start_time=r["start_time"], end_time=r["end_time"], progress=r["progress"],
            unmanaged=bool(r["unmanaged"]), num_trials=r["num_trials"],
            external_id=r["external_id"], config_text=r["config"],
            best=r["best_value"], best_trial_id=r["best_trial_id"],
            checkpoint_size=r["checkpoint_size"], checkpoint_count=r["checkpoint_count"],
            warnings=loads(r["warnings"]) if r["warnings"] else [],
        )

    @property
    def conf(self) -> ExperimentSchema:
        """The stored config as the typed model: its defaults are the schema's, declared once
        (the stored config is the full expconf, so nothing here fills in a default). Its
        resources' priority, weight, pool and max slots are as created: the record's own
        fields (and `config`) have their current values."""
        return typed_config(self.config_text)

    @property
    def slots_per_trial(self) -> int:
        return self.conf.resources.slots_per_trial

    @property
    def max_restarts(self) -> int:
        return self.conf.max_restarts

    @property
    def searcher_metric(self) -> str:
        return self.conf.searcher.metric

    @property
    def smaller_is_better(self) -> bool:
        return self.conf.searcher.smaller_is_better


class ListedExperiment(NamedTuple):
    """An experiment as a list without configs shows it (`omitConfig=true`, `dettui e list`):
    its columns, and of its config only what the list shows (the hyperparameters and the
    searcher's metric). No `Experiment` is built and `original_config` is not read: a list
    of 10,000 took 550 ms that way and 170 ms this way."""

    id: int
    name: str
    description: str | None
    labels: list[str]
    state: ExperimentState
    archived: bool
    owner_id: int
    username: str
    searcher_type: str
    job_id: str
    resource_pool: str
    start_time: float
    end_time: float | None
    progress: float | None
    unmanaged: bool
    num_trials: int
    external_id: str | None
    best: float | None
    best_trial_id: int | None
    hyperparameters: dict[str, Any]
    searcher_metric: str | None
    checkpoint_size: int
    checkpoint_count: int
    warnings: list[str]

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> ListedExperiment:
        config = loads(r["config"])
        searcher = config.get("searcher")
        return cls(
            r["id"], r["name"], r["description"], loads(r["labels"]),
            ExperimentState(r["state"]), bool(r["archived"]), r["owner_id"], r["username"],
            r["searcher_type"], r["job_id"], r["resource_pool"], r["start_time"],
            r["end_time"], r["progress"], bool(r["unmanaged"]), r["num_trials"],
            r["external_id"], r["best_value"], r["best_trial_id"],
            config.get("hyperparameters", {}),
            searcher.get("metric") if isinstance(searcher, dict) else None,
            r["checkpoint_size"], r["checkpoint_count"],
            loads(r["warnings"]) if r["warnings"] else [])


def _with_columns(config: dict[str, Any], r: sqlite3.Row) -> dict[str, Any]:
    """Priority, weight, pool and max slots have one home, their columns (job updates change
    them there); the config shows them from there."""
    resources = config.get("resources")
    if isinstance(resources, dict):
        resources.update(priority=r["priority"], weight=r["weight"],
                         resource_pool=r["resource_pool"], max_slots=r["max_slots"])
    return config


class Job(NamedTuple):
    """What the scheduler needs of a live experiment: its columns only, no config read (a
    tuple: a pass reads 10,000 of them)."""

    id: int
    job_id: str
    state: ExperimentState
    resource_pool: str
    priority: int
    weight: float
    max_slots: int | None
    queue_position: float
    slots_per_trial: int

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> Job:
        """From a row of JOB_COLUMNS, in that order."""
        return cls(r[0], r[1], _EXPERIMENT_STATES[r[2]], *r[3:9])


JOB_COLUMNS = ("id job_id state resource_pool priority weight max_slots queue_position "
               "slots_per_trial")
_EXPERIMENT_STATES = {s.value: s for s in ExperimentState}


class JobView(NamedTuple):
    """What the job queue shows of a live experiment: columns only, no config read. A tuple:
    a 10,000-job queue builds 10,000 of them (a frozen dataclass took 3.5x as long)."""

    COLUMNS = ("id name state owner_id job_id resource_pool priority weight queue_position "
               "start_time progress slots_per_trial")

    id: int
    name: str
    state: ExperimentState
    owner_id: int
    job_id: str
    resource_pool: str
    priority: int
    weight: float
    queue_position: float
    start_time: float
    progress: float | None
    slots_per_trial: int
    username: str

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> JobView:
        """From a row of COLUMNS and then the owner's username, in that order (by position:
        a 10,000-job queue reads 10,000 of them)."""
        return cls(r[0], r[1], _EXPERIMENT_STATES[r[2]], *r[3:])


@functools.lru_cache(maxsize=4096)
def typed_config(text: str) -> ExperimentSchema:
    """A stored config (JSON text) as the schema's model; cached by its text, since the same
    experiment's record is read again on every scheduling pass and list."""
    return ExperimentSchema.model_validate_json(text)


@dataclass(frozen=True)
class Trial:
    COLUMNS: ClassVar[str] = ("id experiment_id request_id task_id hparams seed state restarts "
                              "run_id total_batches start_time end_time progress runner_state "
                              "searcher_stopped external_id last_activity search_id early_exit")

    id: int
    experiment_id: int
    request_id: str
    task_id: str
    hparams: dict[str, Any]
    seed: int
    state: TrialState
    restarts: int
    run_id: int
    total_batches: int
    start_time: float
    end_time: float | None
    progress: float | None
    runner_state: str
    searcher_stopped: bool
    external_id: str | None = None  # detached trials: the script's own id for it
    last_activity: float | None = None  # detached trials: the last heartbeat
    search_id: int | None = None  # the trial's id within its experiment's searcher
    early_exit: str | None = None  # the reason a trial reported through early_exit

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Trial:
        return cls(
            id=r["id"], experiment_id=r["experiment_id"], request_id=r["request_id"],
            task_id=r["task_id"], hparams=loads(r["hparams"]), seed=r["seed"],
            state=TrialState(r["state"]), restarts=r["restarts"], run_id=r["run_id"],
            total_batches=r["total_batches"], start_time=r["start_time"],
            end_time=r["end_time"], progress=r["progress"], runner_state=r["runner_state"],
            searcher_stopped=bool(r["searcher_stopped"]), external_id=r["external_id"],
            last_activity=r["last_activity"], search_id=r["search_id"],
            early_exit=r["early_exit"],
        )


def container_id(alloc_id: str, rank: int) -> str:
    """The container id of the part at node `rank` of allocation `alloc_id`: the allocation
    id without the experiment id, and the rank (Determined's DET_CONTAINER_ID)."""
    return f"{alloc_id.split('.', 1)[-1]}.{rank}"


@dataclass(frozen=True)
class Allocation:
    COLUMNS: ClassVar[str] = ("id trial_id run_id state token agent_id slots start_time end_time "
                              "exit_code exit_reason preempt_requested preempt_acked "
                              "kill_requested parts part_exits port daemons")

    id: str
    trial_id: int
    run_id: int
    state: AllocationState
    token_hash: str  # SHA-256 of DET_SESSION_TOKEN (the token itself is never stored)
    agent_id: str
    slots: list[int]
    start_time: float
    end_time: float | None
    exit_code: int | None
    exit_reason: str | None
    preempt_requested: bool
    preempt_acked: bool
    kill_requested: bool
    parts: list[tuple[str, list[int]]]  # (agent, slots) in node-rank order, chief first
    part_exits: dict[str, list[Any]]  # agent -> [exit code, reason], in the order they came
    port: int | None
    daemons: list[str] = field(default_factory=list)  # agents whose part is a daemon

    @property
    def agents(self) -> list[str]:
        return [agent for agent, _ in self.parts]

    def container_id(self, agent_id: str) -> str:
        """The id of `agent_id`'s part (Determined's container id: DET_CONTAINER_ID, the logs'
        containerId, the slots' container): the allocation id without the experiment id, and
        the node rank."""
        rank = self.agents.index(agent_id) if agent_id in self.agents else 0
        return container_id(self.id, rank)

    def agent_of(self, resources_id: str) -> str | None:
        """The agent whose part has this resources (container) id."""
        return next((a for a in self.agents if self.container_id(a) == resources_id), None)

    @property
    def workers(self) -> list[str]:
        """The agents whose part is not a daemon."""
        return [a for a in self.agents if a not in self.daemons]

    def slots_on(self, agent_id: str) -> list[int]:
        return next((slots for agent, slots in self.parts if agent == agent_id), [])

    @property
    def total_slots(self) -> int:
        return sum(len(slots) for _, slots in self.parts)

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Allocation:
        return cls(
            id=r["id"], trial_id=r["trial_id"], run_id=r["run_id"],
            state=AllocationState(r["state"]), token_hash=r["token"], agent_id=r["agent_id"],
            slots=loads(r["slots"]), start_time=r["start_time"], end_time=r["end_time"],
            exit_code=r["exit_code"], exit_reason=r["exit_reason"],
            preempt_requested=bool(r["preempt_requested"]),
            preempt_acked=bool(r["preempt_acked"]), kill_requested=bool(r["kill_requested"]),
            parts=[(p[0], list(p[1])) for p in loads(r["parts"])]
            or [(r["agent_id"], loads(r["slots"]))],
            part_exits=loads(r["part_exits"]), port=r["port"],
            daemons=loads(r["daemons"]),
        )


@dataclass(frozen=True)
class Metric:
    COLUMNS: ClassVar[str] = ("id trial_id run_id grp steps_completed report_time metrics "
                              "batch_metrics")

    trial_id: int
    run_id: int
    group: str
    steps_completed: int
    report_time: float
    metrics: dict[str, Any]
    batch_metrics: list[dict[str, Any]] | None

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Metric:
        bm = r["batch_metrics"]
        return cls(r["trial_id"], r["run_id"], r["grp"], r["steps_completed"],
                   r["report_time"], loads(r["metrics"]), loads(bm) if bm else None)


@dataclass(frozen=True)
class LogLine:
    COLUMNS: ClassVar[str] = ("id trial_id task_id allocation_id agent_id container_id rank_id "
                              "stdtype source level timestamp log")

    id: int
    trial_id: int | None
    task_id: str
    allocation_id: str | None
    agent_id: str | None
    container_id: str | None
    rank_id: int | None
    stdtype: str | None
    source: str
    level: str | None
    timestamp: float
    log: str

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> LogLine:
        return cls(r["id"], r["trial_id"], r["task_id"], r["allocation_id"], r["agent_id"],
                   r["container_id"], r["rank_id"], r["stdtype"], r["source"], r["level"],
                   r["timestamp"], r["log"])


@dataclass(frozen=True)
class Checkpoint:
    COLUMNS: ClassVar[str] = ("uuid trial_id experiment_id task_id allocation_id report_time "
                              "state resources metadata steps_completed storage_id")

    uuid: str
    trial_id: int | None
    experiment_id: int | None
    task_id: str
    allocation_id: str | None
    report_time: float
    state: CheckpointState
    resources: dict[str, str]
    metadata: dict[str, Any]
    steps_completed: int | None
    storage_id: int | None

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Checkpoint:
        return cls(r["uuid"], r["trial_id"], r["experiment_id"], r["task_id"],
                   r["allocation_id"], r["report_time"], CheckpointState(r["state"]),
                   loads(r["resources"]), loads(r["metadata"]),
                   r["steps_completed"], r["storage_id"])


@dataclass(frozen=True)
class Agent:
    COLUMNS: ClassVar[str] = ("id pool slots hostname addresses registered_time enabled draining "
                              "disabled_slots")

    id: str
    pool: str
    slots: list[dict[str, Any]]
    hostname: str
    addresses: list[str]
    registered_time: float
    enabled: bool
    draining: bool = False  # disabled with --drain: running work finishes
    disabled_slots: tuple[int, ...] = ()

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Agent:
        return cls(r["id"], r["pool"], loads(r["slots"]), r["hostname"],
                   loads(r["addresses"]), r["registered_time"], bool(r["enabled"]),
                   bool(r["draining"]), tuple(loads(r["disabled_slots"])))

    def slot_enabled(self, slot_id: int) -> bool:
        return self.enabled and slot_id not in self.disabled_slots
