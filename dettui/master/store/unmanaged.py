"""Unmanaged (detached) experiments and trials (WIRE §8).

A script outside the cluster creates them, starts its trial, heartbeats and ends it. They have
no job and no allocation, so nothing here is ever scheduled. An experiment's state is its most
advanced trial's (`lifecycle.detached_experiment_state`). Each change is a store command whose
effects tell followers and collect the checkpoints of an experiment that ended.

An experiment's external id is its owner's name for it (migration 0028): the same id given by
two users names two experiments, and a PUT by external id finds only the caller's own.
Determined keeps them unique over the whole master, so there one user's PUT is handed
another's experiment; dettui does not follow it there. A trial's external id is its
experiment's name for it.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from typing import Any

from dettui.errors import FailedPrecondition
from dettui.master import lifecycle, transitions
from dettui.master.effects import Done, Effects, experiment_changed, notify
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import exits, ids
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.experiments import NewExperiment
from dettui.master.store.records import Checkpoint, Experiment, Trial, columns
from dettui.master.store.tx import command, step, transaction
from dettui.models import ExperimentState, TrialState

FROM_TRIALS = f"SELECT {columns(Trial.COLUMNS)} FROM trials"

LOST_AFTER = 300.0  # seconds without a heartbeat before a running detached trial is ERROR
_ENDED = tuple(s.value for s in TrialState if s.is_terminal())


@command
def create_experiment(
    conn: sqlite3.Connection, new: NewExperiment, external_id: str | None = None
) -> Done[Experiment]:
    """Store a detached experiment, PAUSED until one of its trials starts. With an external
    id its owner already gave one, that experiment is returned unchanged: an external id is
    its owner's name (another user's same id names another experiment)."""
    with transaction(conn):
        if external_id is not None:
            row = conn.execute("SELECT id FROM experiments WHERE owner_id=? AND external_id=?",
                               (new.owner_id, external_id)).fetchone()
            if row is not None:
                return Done(exp_store.get(conn, int(row["id"])))
        now = time.time()
        exp_id = ids.next_id(conn, "experiments")
        conn.execute(
            "INSERT INTO experiments (id, name, description, labels, state, owner_id, config, "
            "original_config, searcher_type, job_id, resource_pool, priority, weight, max_slots, "
            "queue_position, start_time, unmanaged, external_id, best_stale) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,1,?,0)",
            (exp_id, new.name, new.description,
             json.dumps(new.labels), ExperimentState.PAUSED.value, new.owner_id,
             json.dumps(new.config), new.original_config, new.searcher_type,
             str(uuid.uuid4()), new.resource_pool, new.priority, new.weight, new.max_slots,
             now * 1e6, now, external_id),
        )
    return Done(exp_store.get(conn, exp_id), experiment_changed(exp_id))


@command
def create_trial(
    conn: sqlite3.Connection, exp_id: int, hparams: dict[str, Any],
    external_id: str | None = None,
) -> Done[Trial]:
    """A PAUSED trial with task id `<expId>.<uuid or external id>`; an external id already
    known in the experiment returns that trial instead."""
    with transaction(conn):
        if external_id is not None:
            row = conn.execute(f"{FROM_TRIALS} WHERE experiment_id=? AND external_id=?",
                               (exp_id, external_id)).fetchone()
            if row is not None:
                return Done(Trial.from_row(row), experiment_changed(exp_id, int(row["id"])))
        request_id = str(uuid.uuid4())
        trial_id = ids.next_id(conn, "trials")
        conn.execute(
            "INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, state, "
            "start_time, external_id, summary_stale) VALUES (?,?,?,?,?,0,?,?,?,0)",
            (trial_id, exp_id, request_id,
             f"{exp_id}.{external_id or request_id}", json.dumps(hparams),
             TrialState.PAUSED.value, time.time(), external_id),
        )
    return Done(trial_store.get(conn, trial_id), experiment_changed(exp_id, trial_id))


@command
def start_trial(
    conn: sqlite3.Connection, trial_id: int, resume: bool
) -> Done[tuple[Trial, Checkpoint | None]]:
    """A new run of the trial: run id + 1, RUNNING. From the second run on, also the COMPLETED
    checkpoint with the most steps (SEMANTICS §3.4)."""
    with transaction(conn):
        trial = trial_store.get(conn, trial_id)
        if not resume and trial.run_id != 0:
            raise FailedPrecondition("trial has already been started")
        now = time.time()
        conn.execute("UPDATE trials SET run_id=run_id+1, state=?, last_activity=?, "
                     "end_time=NULL WHERE id=?", (TrialState.RUNNING.value, now, trial_id))
        changed = settle(conn, trial.experiment_id, now)
    trial = trial_store.get(conn, trial_id)
    latest = ckpt_store.latest_for_trial(conn, trial_id) if trial.run_id > 1 else None
    return Done((trial, latest), experiment_changed(trial.experiment_id, trial_id)
                | settled(trial.experiment_id, changed))


@command
def patch_trial(
    conn: sqlite3.Connection, trial_id: int, state: TrialState | None
) -> Done[Trial]:
    """A heartbeat (no state) or a state change; a terminal state sets the end time. The
    experiment's state follows its trials'."""
    with transaction(conn):
        trial = trial_store.get(conn, trial_id)
        now = time.time()
        if state is None:
            conn.execute("UPDATE trials SET last_activity=? WHERE id=?", (now, trial_id))
        else:  # a detached trial is in whatever state its script says (Determined's too)
            conn.execute("UPDATE trials SET state=?, last_activity=?, end_time=? WHERE id=?",
                         (state.value, now, now if state.is_terminal() else None, trial_id))
        changed = settle(conn, trial.experiment_id, now)
    told = Effects() if state is None else (
        notify(f"logs:{trial_id}") | experiment_changed(trial.experiment_id, trial_id))
    return Done(trial_store.get(conn, trial_id), told | settled(trial.experiment_id, changed))


@command
def cancel(conn: sqlite3.Connection, exp_id: int) -> Effects:
    """`dettui e cancel|kill`: every trial that has not ended is CANCELED (the script itself
    cannot be reached; a later report of its own may still end its trial)."""
    with transaction(conn):
        now = time.time()
        marks = ",".join("?" * len(_ENDED))
        conn.execute(f"UPDATE trials SET state=?, end_time=? WHERE experiment_id=? AND "
                     f"state NOT IN ({marks})",
                     (TrialState.CANCELED.value, now, exp_id, *_ENDED))
        if conn.execute("SELECT 1 FROM trials WHERE experiment_id=?", (exp_id,)).fetchone():
            changed = settle(conn, exp_id, now)
        else:
            exits.finish_experiment(conn, exp_id, ExperimentState.CANCELED, now)
            changed = ExperimentState.CANCELED
    return experiment_changed(exp_id) | settled(exp_id, changed)


@command
def mark_lost(conn: sqlite3.Connection, before: float) -> Effects:
    """RUNNING detached trials not heard of since `before` end in ERROR (their script died
    without saying so); their experiments follow."""
    with transaction(conn):
        rows = conn.execute(
            "SELECT t.id, t.experiment_id FROM trials t JOIN experiments e "
            "ON e.id = t.experiment_id WHERE e.unmanaged=1 AND t.state=? "
            "AND COALESCE(t.last_activity, t.start_time) < ?",
            (TrialState.RUNNING.value, before)).fetchall()
        for r in rows:
            conn.execute("UPDATE trials SET state=?, end_time=COALESCE(last_activity, "
                         "start_time) WHERE id=?", (TrialState.ERROR.value, r["id"]))
        out = Effects()
        for exp_id in sorted({int(r["experiment_id"]) for r in rows}):
            out |= settled(exp_id, settle(conn, exp_id, time.time()))
    return out


def settled(exp_id: int, changed: ExperimentState | None) -> Effects:
    """A detached experiment whose state changed: followers told; checkpoints collected when
    it ended."""
    if changed is None:
        return Effects()
    return experiment_changed(exp_id) | Effects(collect=(exp_id,) if changed.is_terminal()
                                                else ())


@step
def settle(conn: sqlite3.Connection, exp_id: int, now: float) -> ExperimentState | None:
    """Set the experiment's state from its trials' (inside the caller's transaction); the new
    state if it changed."""
    rows = conn.execute("SELECT state, end_time FROM trials WHERE experiment_id=?",
                        (exp_id,)).fetchall()
    new = lifecycle.detached_experiment_state([TrialState(r["state"]) for r in rows])
    old = conn.execute("SELECT state FROM experiments WHERE id=?", (exp_id,)).fetchone()
    if new is None or old is None or old["state"] == new.value:
        return None
    transitions.require(ExperimentState(old["state"]), new)
    if new.is_terminal():
        end = max((r["end_time"] for r in rows if r["end_time"] is not None), default=now)
        exits.finish_experiment(conn, exp_id, new, end)
    else:
        conn.execute("UPDATE experiments SET state=?, end_time=NULL, gc_pending=0 WHERE id=?",
                     (new.value, exp_id))
    return new
