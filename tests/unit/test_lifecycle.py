"""Exit classification (SEMANTICS §3.5) and experiment outcomes."""

from __future__ import annotations

import pytest

from dettui.master.lifecycle import LOST, ExitFacts, decide_trial, experiment_outcome
from dettui.models import ExperimentState as E
from dettui.models import TrialState as T


def facts(code: int | None = 0, reason: str = "", acked: bool = False, killed: bool = False,
          exp: E = E.ACTIVE, restarts: int = 0, max_restarts: int = 5,
          stopped: bool = False) -> ExitFacts:
    return ExitFacts(code, reason, acked, killed, T.RUNNING, exp, restarts, max_restarts, stopped)


CASES = [
    ("exit 0 completes", facts(0), (T.COMPLETED, 0)),
    ("non-zero restarts", facts(3, "error"), (T.QUEUED, 1)),
    ("restarts beyond max_restarts error", facts(3, "error", restarts=1, max_restarts=1),
     (T.ERROR, 2)),
    ("max_restarts 0 errors at once", facts(1, "error", max_restarts=0), (T.ERROR, 1)),
    ("acked preemption requeues whatever the code", facts(0, acked=True), (T.QUEUED, 0)),
    ("acked preemption while paused waits", facts(0, acked=True, exp=E.PAUSED), (T.PAUSED, 0)),
    ("lost allocation requeues without a restart", facts(None, LOST), (T.QUEUED, 0)),
    ("kill cancels", facts(None, "killed", killed=True, exp=E.STOPPING_KILLED), (T.CANCELED, 0)),
    ("a preemption that timed out and was killed requeues",
     facts(None, "killed", killed=True), (T.QUEUED, 0)),
    ("a pause that timed out and was killed pauses",
     facts(None, "killed", killed=True, exp=E.PAUSED), (T.PAUSED, 0)),
    ("cancel after checkpoint cancels", facts(0, acked=True, exp=E.STOPPING_CANCELED),
     (T.CANCELED, 0)),
    ("searcher-stopped trial completes", facts(0, stopped=True), (T.COMPLETED, 0)),
    ("searcher-stopped trial that fails errors", facts(2, "error", stopped=True), (T.ERROR, 0)),
]


@pytest.mark.parametrize(("name", "f", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide_trial(name: str, f: ExitFacts, expected: tuple[T, int]) -> None:
    assert decide_trial(f) == expected


def test_experiment_outcome() -> None:
    assert experiment_outcome(E.ACTIVE, [T.COMPLETED], True) is E.COMPLETED
    assert experiment_outcome(E.ACTIVE, [T.ERROR], True) is E.ERROR
    assert experiment_outcome(E.ACTIVE, [T.ERROR, T.COMPLETED], True) is E.COMPLETED
    assert experiment_outcome(E.ACTIVE, [T.RUNNING], True) is None
    assert experiment_outcome(E.STOPPING_KILLED, [T.CANCELED], True) is E.CANCELED
    assert experiment_outcome(E.COMPLETED, [T.COMPLETED], True) is None
