"""Experiment control as store commands: each transition is one transaction that returns what
is left to do outside the store (`Effects`: kills, preemptions), so no crash can leave an
experiment in one state and its trials in another. What a crash loses of the messages is
re-derived from the committed state: kills are resent when agents register (`kill_requested`),
preemptions are read from the store by the long-poll (`preempt_requested`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from dettui.errors import FailedPrecondition
from dettui.master import transitions
from dettui.master.effects import Effects, Kill, experiment_changed, notify
from dettui.master.store import exits
from dettui.master.store import experiments as exp_store
from dettui.master.store.records import Allocation
from dettui.master.store.trials import allocation
from dettui.master.store.tx import command, step, transaction
from dettui.models import AllocationState, ExperimentState, TrialState


def kills(allocs: list[Allocation], reason: str) -> tuple[Kill, ...]:
    """Kill orders for these allocations' parts still running."""
    return tuple(Kill(a.id, tuple(x for x in a.agents if x not in a.part_exits), reason)
                 for a in allocs)


@command
def stop(conn: sqlite3.Connection, exp_id: int, how: ExperimentState) -> Effects:
    """Pause (PAUSED), cancel (STOPPING_CANCELED) or kill (STOPPING_KILLED) an experiment: its
    state, its idle trials and its running allocations' flags, in one commit."""
    with transaction(conn):
        return stop_in(conn, exp_id, how)


@step
def stop_in(conn: sqlite3.Connection, exp_id: int, how: ExperimentState) -> Effects:
    """`stop` inside a transaction the caller holds (STOPPING_ERROR too: a checkpoint over
    its quota, `checkpoint_quota`, asks the trials to stop as a cancel does)."""
    exp = exp_store.get(conn, exp_id)
    if exp.state.is_terminal() and how is ExperimentState.PAUSED:
        raise FailedPrecondition("experiment in terminal state")
    if exp.state.is_terminal():
        return Effects()  # cancel or kill of an ended experiment: nothing left to stop
    if how is not ExperimentState.PAUSED and _HARDER.get(exp.state, 0) >= _HARDER[how]:
        return Effects()  # a cancel of what is being killed: it stops already, harder
    transitions.require(exp.state, how)
    conn.execute("UPDATE experiments SET state=? WHERE id=?", (how.value, exp_id))
    idle = TrialState.PAUSED if how is ExperimentState.PAUSED else TrialState.CANCELED
    now = time.time() if idle.is_terminal() else None
    conn.execute(
        "UPDATE trials SET state=?, end_time=COALESCE(?, end_time) "
        "WHERE experiment_id=? AND state IN (?, ?)",
        (idle.value, now, exp_id, TrialState.QUEUED.value, TrialState.PAUSED.value))
    live = [allocation(conn, r["id"]) for r in conn.execute(
        "SELECT a.id FROM allocations a JOIN trials t ON t.id = a.trial_id "
        "WHERE t.experiment_id=? AND a.state != ? ORDER BY a.start_time",
        (exp_id, AllocationState.EXITED.value))]
    if how is ExperimentState.STOPPING_KILLED:
        conn.executemany(
            "UPDATE allocations SET kill_requested=1, state=? WHERE id=?",
            [(AllocationState.TERMINATING.value, a.id) for a in live])
        return (Effects(kills=kills([allocation(conn, a.id) for a in live],
                                    "experiment killed"))
                | _changed(exp_id) | exits.ended_effects(exits.settle(conn, exp_id)))
    conn.executemany("UPDATE allocations SET preempt_requested=1 WHERE id=?",
                     [(a.id,) for a in live])
    return (Effects(preempted=tuple(a.id for a in live)) | _changed(exp_id)
            | exits.ended_effects(exits.settle(conn, exp_id)))


_HARDER = {ExperimentState.STOPPING_CANCELED: 1, ExperimentState.STOPPING_ERROR: 1,
           ExperimentState.STOPPING_KILLED: 2}  # how hard a stop is


def _changed(exp_id: int) -> Effects:
    return experiment_changed(exp_id, jobs=True) | Effects(kick=True)


@command
def activate(conn: sqlite3.Connection, exp_id: int) -> Effects:
    """A PAUSED experiment and its PAUSED trials become ACTIVE and QUEUED in one commit;
    nothing if it is active; refused if it is stopping or has ended."""
    with transaction(conn):
        exp = exp_store.get(conn, exp_id)
        if exp.state.is_terminal():
            raise FailedPrecondition("experiment in terminal state")
        if exp.state is ExperimentState.ACTIVE:
            return Effects()
        transitions.require(exp.state, ExperimentState.ACTIVE)  # a stopping one stays so
        conn.execute("UPDATE experiments SET state=? WHERE id=?",
                     (ExperimentState.ACTIVE.value, exp_id))
        conn.execute("UPDATE trials SET state=? WHERE experiment_id=? AND state=?",
                     (TrialState.QUEUED.value, exp_id, TrialState.PAUSED.value))
    return _changed(exp_id)


@command
def kill_trial(conn: sqlite3.Connection, trial_id: int) -> Effects:
    """`det trial kill`: the trial becomes STOPPING_KILLED and its running allocation is
    killed (CANCELED when it exits); a trial with nothing running is CANCELED at once, and the
    searcher hears of it. The rest of the experiment goes on."""
    from dettui.master.store import search as search_store
    from dettui.master.store import trials as trial_store

    with transaction(conn):
        trial = trial_store.get(conn, trial_id)
        if trial.state.is_terminal() or trial.state is TrialState.STOPPING_KILLED:
            return Effects()
        live = [allocation(conn, r["id"]) for r in conn.execute(
            "SELECT id FROM allocations WHERE trial_id=? AND state != ?",
            (trial_id, AllocationState.EXITED.value))]
        exp = exp_store.get(conn, trial.experiment_id)
        told = notify(f"trial:{trial_id}", f"experiment:{exp.id}", "jobs", "experiments") | \
            Effects(kick=True)
        if not live:
            transitions.require(trial.state, TrialState.CANCELED)
            conn.execute("UPDATE trials SET state=?, end_time=? WHERE id=?",
                         (TrialState.CANCELED.value, time.time(), trial_id))
            search_store.apply_end(conn, exp, trial_store.get(conn, trial_id))
            return told | exits.ended_effects(exits.settle(conn, exp.id))
        transitions.require(trial.state, TrialState.STOPPING_KILLED)
        conn.execute("UPDATE trials SET state=? WHERE id=?",
                     (TrialState.STOPPING_KILLED.value, trial_id))
        conn.executemany("UPDATE allocations SET kill_requested=1, state=? WHERE id=?",
                         [(AllocationState.TERMINATING.value, a.id) for a in live])
        return Effects(kills=kills([allocation(conn, a.id) for a in live], "trial killed")) \
            | told


@command
def continue_experiment(conn: sqlite3.Connection, exp_id: int,
                        config: dict[str, Any]) -> Effects:
    """`det e continue` (ContinueExperiment): an ended experiment runs again with `config`; a
    single-searcher trial (or, for grid and random, each trial that did not complete) is
    queued again with its restarts zeroed, to resume from its latest checkpoint."""
    from dettui.master.store import search as search_store
    from dettui.master.store import trials as trial_store

    with transaction(conn):
        exp = exp_store.get(conn, exp_id)
        if exp_store.is_deleting(conn, exp_id):
            raise FailedPrecondition(f"experiment {exp_id} is being deleted")
        if not exp.state.is_terminal():
            raise FailedPrecondition(f"experiment in non terminal state "
                                     f"'{exp.state.value.removeprefix('STATE_')}', try again "
                                     "later")
        trials = trial_store.for_experiment(conn, exp_id)
        single = exp.conf.searcher.name == "single"  # continue keeps the searcher
        again = trials if single else [t for t in trials if t.state is not TrialState.COMPLETED]
        if not again:
            raise FailedPrecondition("experiment has been completed, cannot continue this "
                                     "experiment")
        conn.executemany("UPDATE trials SET state=?, restarts=0, end_time=NULL WHERE id=?",
                         [(TrialState.QUEUED.value, t.id) for t in again])
        search_store.reopen(conn, exp, [t.id for t in again])  # its progress counts them again
        conn.execute("UPDATE experiments SET state=?, end_time=NULL, progress=0, config=?, "
                     "slots_per_trial=?, gc_pending=0 WHERE id=?",
                     (ExperimentState.ACTIVE.value, json.dumps(config),
                      exp_store.slots_of(config), exp_id))
    return notify(f"experiment:{exp_id}", "experiments", "jobs") | Effects(kick=True)
