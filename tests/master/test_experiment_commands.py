"""Experiment changes that are one command each (issue 30, item 2): archive and delete check
the experiment's state inside their own transaction, and a PATCH of the GC policy stores the
policy and makes its collection due in the same commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dettui.errors import FailedPrecondition
from dettui.master.checkpoint_policy import GcPolicy
from dettui.master.effects import Effects, experiment_changed
from dettui.master.store import control, exits, experiments
from dettui.master.store import db as dbmod
from dettui.master.store.tx import CrashPlan
from dettui.models import ExperimentState
from tests.master.test_store import _experiments


def _ended(target: Path | str) -> tuple[sqlite3.Connection, int]:
    """A store with one experiment, canceled (nothing ran: it ends at once)."""
    conn = dbmod.connect(target)
    (exp_id, _), = _experiments(conn, 1)
    control.stop(conn, exp_id, ExperimentState.STOPPING_CANCELED)
    assert experiments.get(conn, exp_id).state is ExperimentState.CANCELED
    exits.gc_done(conn, exp_id)
    return conn, exp_id


def test_a_deletion_keeps_its_experiment_ended_until_it_is_gone(store_target: Path | str) -> None:
    """A deletion is two commits with the files removed between: the first marks the experiment
    `deleting`, and `det e continue` refuses it meanwhile (before, a continue between the route's
    check and the removal ran the experiment again without its checkpoints). `delete` removes
    only a marked experiment; a continue that came first leaves nothing to mark."""
    conn, exp_id = _ended(store_target)
    seen = experiments.get(conn, exp_id)
    control.continue_experiment(conn, exp_id, seen.config)  # a continue before the deletion
    with pytest.raises(FailedPrecondition, match="only an ended experiment"):
        experiments.begin_delete(conn, exp_id)
    with pytest.raises(FailedPrecondition, match="only an ended experiment"):
        experiments.delete(conn, exp_id)
    assert experiments.get(conn, exp_id).state is ExperimentState.ACTIVE
    control.stop(conn, exp_id, ExperimentState.STOPPING_CANCELED)
    with pytest.raises(FailedPrecondition, match="not being deleted"):
        experiments.delete(conn, exp_id)  # not without the mark
    experiments.begin_delete(conn, exp_id)
    assert experiments.pending_deletions(conn) == [exp_id]
    with pytest.raises(FailedPrecondition, match="is being deleted"):
        control.continue_experiment(conn, exp_id, seen.config)  # while its files go
    assert experiments.get(conn, exp_id).state is ExperimentState.CANCELED
    assert experiments.delete(conn, exp_id) == experiment_changed(exp_id, jobs=True)
    assert experiments.of_ids(conn, [exp_id]) == []
    assert experiments.pending_deletions(conn) == []


def test_archive_checks_the_state_in_its_transaction(store_target: Path | str) -> None:
    conn = dbmod.connect(store_target)
    (exp_id, _), = _experiments(conn, 1)
    with pytest.raises(FailedPrecondition, match="not in terminal state"):
        experiments.set_archived(conn, exp_id, True)
    with pytest.raises(FailedPrecondition, match="not archived"):
        experiments.set_archived(conn, exp_id, False)
    control.stop(conn, exp_id, ExperimentState.STOPPING_CANCELED)
    assert experiments.set_archived(conn, exp_id, True) == experiment_changed(exp_id, jobs=True)
    assert experiments.get(conn, exp_id).archived
    with pytest.raises(FailedPrecondition, match="already archived"):
        experiments.set_archived(conn, exp_id, True)
    experiments.set_archived(conn, exp_id, False)
    assert not experiments.get(conn, exp_id).archived


def test_a_new_gc_policy_is_stored_and_collected_in_one_commit(
        store_target: Path | str) -> None:
    """PATCH checkpointStorage: the policy in the config and `gc_pending` in one commit, and
    the collection among its effects (the dispatcher collects with the stored policy, then
    clears `gc_pending`: a crash in between collects again at the next start)."""
    conn, exp_id = _ended(store_target)
    plan = CrashPlan(at=0, after=False)  # counts commits, never fires
    conn.crash_plan = plan  # type: ignore[attr-defined]
    done = experiments.update_fields(conn, exp_id, gc_policy=GcPolicy(0, 2, 1), name="n")
    assert plan.commits == 1
    storage = done.value.config["checkpoint_storage"]
    assert (storage["save_experiment_best"], storage["save_trial_best"],
            storage["save_trial_latest"]) == (0, 2, 1)
    assert done.value.name == "n"
    assert exits.gc_pending(conn) == [exp_id]
    assert done.effects.collect == (exp_id,) and done.effects.kick
    plain = experiments.update_fields(conn, exp_id, priority=3)
    assert plain.effects.collect == () and plain.value.priority == 3
    assert experiments.update_fields(conn, exp_id).effects == Effects()  # nothing to change
    assert plan.commits == 2
