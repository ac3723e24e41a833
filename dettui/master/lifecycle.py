"""What an allocation's exit means for its trial, and a trial's end for its experiment.

Pure decisions following SEMANTICS §3.5; the cluster applies them to the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dettui.models import ExperimentState, TrialState

# Exit reasons an agent or the master reports besides a plain exit code.
LOST = "lost"  # the agent vanished or restarted without the process: not the trial's fault
KILLED = "killed"
SPAWN_FAILED = "spawn_failed"


@dataclass(frozen=True)
class ExitFacts:
    exit_code: int | None
    reason: str
    preempt_acked: bool
    kill_requested: bool
    trial_state: TrialState
    experiment_state: ExperimentState
    restarts: int
    max_restarts: int
    searcher_stopped: bool = False


def decide_trial(f: ExitFacts) -> tuple[TrialState, int]:
    """The trial's next state and restart count after one allocation exits."""
    failed = f.reason not in ("", LOST) or (f.exit_code not in (0, None))
    if f.trial_state is TrialState.STOPPING_KILLED:  # `det trial kill`: whatever the exit
        return TrialState.CANCELED, f.restarts
    if f.reason == LOST and not f.kill_requested:
        return _requeue(f), f.restarts
    if f.experiment_state in _STOPPING:
        return _stopped(f, failed), f.restarts
    if f.kill_requested:  # killed by the master (pause or preemption that timed out)
        return _requeue(f), f.restarts
    if f.searcher_stopped:
        return (TrialState.ERROR if failed and not f.preempt_acked else TrialState.COMPLETED,
                f.restarts)
    if f.preempt_acked:
        return _requeue(f), f.restarts
    if not failed:
        return TrialState.COMPLETED, f.restarts
    restarts = f.restarts + 1
    if restarts > f.max_restarts:
        return TrialState.ERROR, restarts
    return _requeue(f), restarts


_STOPPING = {
    ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED,
    ExperimentState.STOPPING_COMPLETED, ExperimentState.STOPPING_ERROR,
}


def _requeue(f: ExitFacts) -> TrialState:
    if f.experiment_state is ExperimentState.PAUSED:
        return TrialState.PAUSED
    return TrialState.QUEUED


def _stopped(f: ExitFacts, failed: bool) -> TrialState:
    if f.experiment_state is ExperimentState.STOPPING_COMPLETED:
        return TrialState.ERROR if failed else TrialState.COMPLETED
    if f.experiment_state is ExperimentState.STOPPING_ERROR:
        return TrialState.ERROR
    return TrialState.CANCELED


def experiment_outcome(
    state: ExperimentState, trial_states: Sequence[TrialState], searcher_done: bool
) -> ExperimentState | None:
    """The experiment's final state once every trial has ended, else None."""
    if state.is_terminal() or not trial_states:
        return None
    if not all(s.is_terminal() for s in trial_states):
        return None
    if state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
        return ExperimentState.CANCELED
    if state is ExperimentState.STOPPING_ERROR:
        return ExperimentState.ERROR
    if not searcher_done and state is ExperimentState.ACTIVE:
        return None
    if any(s is TrialState.COMPLETED for s in trial_states):
        return ExperimentState.COMPLETED
    if all(s is TrialState.CANCELED for s in trial_states):
        return ExperimentState.CANCELED
    return ExperimentState.ERROR


# A detached (unmanaged) experiment is in its most advanced trial's state (Determined's order,
# with CANCELED added for `dettui e cancel|kill`).
_DETACHED_RANK = {TrialState.PAUSED: 10, TrialState.CANCELED: 15, TrialState.ERROR: 20,
                  TrialState.COMPLETED: 30, TrialState.RUNNING: 40}


def detached_experiment_state(trial_states: Sequence[TrialState]) -> ExperimentState | None:
    """A detached experiment's state from its trials': RUNNING > COMPLETED > ERROR > CANCELED >
    PAUSED; None without trials."""
    if not trial_states:
        return None
    best = TrialState.PAUSED
    for s in trial_states:
        if _DETACHED_RANK.get(s, 0) > _DETACHED_RANK[best]:
            best = s
    return ExperimentState(best.value)
