"""Which state changes are allowed, as one table per kind (experiments, trials, allocations),
in the spirit of Determined's `master/pkg/model` transition maps. The store's commands check
every change they make against it (`require`); tests walk every pair.

A state may always stay as it is (a repeated request is not an error). Detached (unmanaged)
experiments take their state from their trials' (RUNNING, and back from an end when a trial is
resumed), so they have a few more changes than managed ones.
"""

from __future__ import annotations

from dettui.errors import FailedPrecondition
from dettui.models import AllocationState, ExperimentState, TrialState

E, T, A = ExperimentState, TrialState, AllocationState
_ENDS_E = {E.COMPLETED, E.CANCELED, E.ERROR}
_STOPPING_E = {E.STOPPING_COMPLETED, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR}

EXPERIMENT: dict[ExperimentState, frozenset[ExperimentState]] = {
    E.ACTIVE: frozenset({E.PAUSED, *_STOPPING_E, *_ENDS_E}),
    E.PAUSED: frozenset({E.ACTIVE, E.RUNNING, *_STOPPING_E, *_ENDS_E}),
    E.STOPPING_COMPLETED: frozenset({E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR,
                                     *_ENDS_E}),
    E.STOPPING_CANCELED: frozenset({E.STOPPING_KILLED, E.STOPPING_ERROR, *_ENDS_E}),
    E.STOPPING_KILLED: frozenset({E.STOPPING_ERROR, *_ENDS_E}),
    E.STOPPING_ERROR: frozenset({E.STOPPING_KILLED, E.STOPPING_CANCELED, *_ENDS_E}),
    # Ended: `det e continue` runs it again; a detached one resumes with a trial of its own.
    E.COMPLETED: frozenset({E.ACTIVE, E.RUNNING, E.PAUSED, E.CANCELED, E.ERROR}),
    E.CANCELED: frozenset({E.ACTIVE, E.RUNNING, E.PAUSED, E.COMPLETED, E.ERROR}),
    E.ERROR: frozenset({E.ACTIVE, E.RUNNING, E.PAUSED, E.COMPLETED, E.CANCELED}),
    # Detached experiments only.
    E.RUNNING: frozenset({E.PAUSED, *_ENDS_E}),
    E.QUEUED: frozenset(),
}

_ENDS_T = {T.COMPLETED, T.CANCELED, T.ERROR}
TRIAL: dict[TrialState, frozenset[TrialState]] = {
    T.QUEUED: frozenset({T.RUNNING, T.PAUSED, *_ENDS_T}),
    T.PAUSED: frozenset({T.QUEUED, T.RUNNING, *_ENDS_T}),
    T.RUNNING: frozenset({T.QUEUED, T.PAUSED, T.STOPPING_KILLED, *_ENDS_T}),
    T.STOPPING_KILLED: frozenset({T.QUEUED, *_ENDS_T}),
    T.STOPPING_CANCELED: frozenset({T.STOPPING_KILLED, *_ENDS_T}),
    T.STOPPING_COMPLETED: frozenset({T.STOPPING_KILLED, *_ENDS_T}),
    T.STOPPING_ERROR: frozenset({T.STOPPING_KILLED, *_ENDS_T}),
    # Ended: `det e continue` queues it again; a detached one runs again when resumed.
    T.COMPLETED: frozenset({T.QUEUED, T.RUNNING}),
    T.CANCELED: frozenset({T.QUEUED, T.RUNNING}),
    T.ERROR: frozenset({T.QUEUED, T.RUNNING}),
    T.ACTIVE: frozenset(),
    T.PULLING: frozenset(),
    T.STARTING: frozenset(),
}

ALLOCATION: dict[AllocationState, frozenset[AllocationState]] = {
    A.ASSIGNED: frozenset({A.RUNNING, A.TERMINATING, A.EXITED}),
    A.RUNNING: frozenset({A.TERMINATING, A.EXITED}),
    A.TERMINATING: frozenset({A.EXITED}),
    A.EXITED: frozenset(),
}

State = ExperimentState | TrialState | AllocationState


def table_of(state: State) -> dict[State, frozenset[State]]:
    if isinstance(state, ExperimentState):
        return EXPERIMENT  # type: ignore[return-value]
    if isinstance(state, TrialState):
        return TRIAL  # type: ignore[return-value]
    return ALLOCATION  # type: ignore[return-value]


def allowed(old: State, new: State) -> bool:
    """Whether `old` may become `new` (staying the same is always allowed)."""
    if type(old) is not type(new):
        return False
    return old is new or new in table_of(old).get(old, frozenset())


def require(old: State, new: State) -> None:
    """Refuse a change the table does not allow, naming both states as Determined does."""
    if not allowed(old, new):
        raise FailedPrecondition(f"{_kind(old)} in state {old.value.removeprefix('STATE_')} "
                                 f"cannot become {new.value.removeprefix('STATE_')}")


def sources(new: State) -> frozenset[State]:
    """Every state that may become `new` (for guards written as SQL: `state IN (...)`)."""
    return frozenset(s for s, to in table_of(new).items() if new in to or s is new)


def _kind(state: State) -> str:
    if isinstance(state, ExperimentState):
        return "experiment"
    return "trial" if isinstance(state, TrialState) else "allocation"
