"""Records and state enums shared by every layer. Imports nothing from dettui."""

from __future__ import annotations

from enum import StrEnum


class ExperimentState(StrEnum):
    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"
    RUNNING = "STATE_RUNNING"
    QUEUED = "STATE_QUEUED"

    def is_terminal(self) -> bool:
        return self in _EXP_TERMINAL

    @property
    def short(self) -> str:
        return self.value.removeprefix("STATE_")


_EXP_TERMINAL = {ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.ERROR}


class TrialState(StrEnum):
    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    QUEUED = "STATE_QUEUED"
    PULLING = "STATE_PULLING"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"

    def is_terminal(self) -> bool:
        return self in _TRIAL_TERMINAL

    @property
    def short(self) -> str:
        return self.value.removeprefix("STATE_")


_TRIAL_TERMINAL = {TrialState.COMPLETED, TrialState.CANCELED, TrialState.ERROR}


class JobState(StrEnum):
    QUEUED = "STATE_QUEUED"
    SCHEDULED = "STATE_SCHEDULED"
    SCHEDULED_BACKFILLED = "STATE_SCHEDULED_BACKFILLED"


class AllocationState(StrEnum):
    """Lifecycle of one attempt to run a trial on some slots."""

    ASSIGNED = "ASSIGNED"  # slots granted, agent not yet confirmed start
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"  # kill sent, waiting for the exit report
    EXITED = "EXITED"

    def is_terminal(self) -> bool:
        return self is AllocationState.EXITED


class CheckpointState(StrEnum):
    ACTIVE = "STATE_ACTIVE"
    COMPLETED = "STATE_COMPLETED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    PARTIALLY_DELETED = "STATE_PARTIALLY_DELETED"


class LogLevel(StrEnum):
    TRACE = "LOG_LEVEL_TRACE"
    DEBUG = "LOG_LEVEL_DEBUG"
    INFO = "LOG_LEVEL_INFO"
    WARNING = "LOG_LEVEL_WARNING"
    ERROR = "LOG_LEVEL_ERROR"
    CRITICAL = "LOG_LEVEL_CRITICAL"
