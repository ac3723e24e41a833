"""What a trial's training reports about itself, each one store command: its progress (with its
experiment's, in the same commit), its runner's state, and an early exit."""

from __future__ import annotations

import sqlite3

from dettui.master.effects import Effects, experiment_changed
from dettui.master.store import experiments as exp_store
from dettui.master.store import search as search_store
from dettui.master.store import trials as trial_store
from dettui.master.store.tx import command, transaction


@command
def progress(conn: sqlite3.Connection, trial_id: int, value: float) -> Effects:
    """The trial's progress (0..1) and its experiment's, recomputed from its trials', in one
    commit."""
    with transaction(conn):
        trial_store.set_fields(conn, trial_id, progress=value)
        trial = trial_store.get(conn, trial_id)
        search_store.refresh_progress(conn, exp_store.get(conn, trial.experiment_id))
    return experiment_changed(trial.experiment_id, trial_id, jobs=True)


@command
def runner_state(conn: sqlite3.Connection, trial_id: int, state: str) -> Effects:
    """What the trial's runner says it is doing (Determined's runner metadata)."""
    with transaction(conn):
        trial_store.set_fields(conn, trial_id, runner_state=state)
        trial = trial_store.get(conn, trial_id)
    return experiment_changed(trial.experiment_id, trial_id)


@command
def early_exit(conn: sqlite3.Connection, trial_id: int, reason: str) -> Effects:
    """The trial's code gives up on its hyperparameters: the searcher has stopped it."""
    with transaction(conn):
        trial_store.set_fields(conn, trial_id, searcher_stopped=1, early_exit=reason)
    return Effects()
