"""Checkpoint storage quotas: a report that would take an experiment (or its owner's
experiments together) past the master's quota is refused, in the transaction that would have
stored it, so two trials reporting at once cannot both slip under it.

Usage is what `store.checkpoints` keeps on each experiment's row: the bytes of its checkpoints
that still hold files (COMPLETED or PARTIALLY_DELETED); a deletion or GC frees its bytes at
once. A refusal, in the same commit, leaves a line in the trial's log (source "master") and
stops the experiment in ERROR (STOPPING_ERROR: its other trials are asked to stop, its queued
ones are canceled), so it does not go on writing checkpoints that cannot be kept; the refused
checkpoint is not recorded. A detached (unmanaged) experiment is not stopped: the master runs
nothing of it, and its trial sees the refusal itself.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from dettui import byte_size
from dettui.master.effects import Done, Effects, experiment_changed, notify
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import control
from dettui.master.store import logs as log_store
from dettui.master.store.records import Checkpoint
from dettui.master.store.tx import command, transaction
from dettui.models import ExperimentState

HOW_TO_FREE = (
    "Free space with `dettui checkpoint delete UUID...` (`dettui checkpoint list EXP_ID` "
    "shows them), or keep fewer checkpoints (checkpoint_storage.save_trial_best, "
    "save_trial_latest and save_experiment_best in the experiment's config; `dettui e set "
    "gc-policy` for a running one), or ask an admin for a larger quota.")


@dataclass(frozen=True)
class Quota:
    """The master's checkpoint storage quotas in bytes (None: none)."""

    per_experiment: int | None = None
    per_user: int | None = None


@dataclass(frozen=True)
class Reported:
    """A report's outcome: the stored checkpoint, or why it was refused."""

    checkpoint: Checkpoint | None
    refusal: str | None = None


@command
def report(conn: sqlite3.Connection, quota: Quota, **fields: Any) -> Done[Reported]:
    """A completed checkpoint stored (`checkpoints.record`; a re-report by the same trial is
    accepted, a uuid another trial's checkpoint has is refused), within the quota (`fields`
    are `record`'s keyword arguments)."""
    with transaction(conn):
        grows = ckpt_store.growth(conn, fields["uuid"], fields["trial_id"], fields["task_id"],
                                  fields["resources"])
        exp_id = fields["experiment_id"]
        refusal = _refusal(conn, quota, exp_id, grows, fields) if grows > 0 else None
        if refusal is None:
            ckpt_store.record(conn, **fields)
            return Done(Reported(ckpt_store.get(conn, fields["uuid"])),
                        experiment_changed(exp_id, fields["trial_id"]))
        row = conn.execute("SELECT state, unmanaged FROM experiments WHERE id=?",
                           (exp_id,)).fetchone()
        stopped = Effects()
        if row["state"] in STOPPABLE and not row["unmanaged"]:
            stopped = control.stop_in(conn, exp_id, ExperimentState.STOPPING_ERROR)
            refusal += f" Experiment {exp_id} stops in ERROR."
        log_store.insert_in(conn, [{
            "trial_id": fields["trial_id"], "task_id": fields["task_id"],
            "allocation_id": fields["allocation_id"], "stdtype": "stderr",
            "source": "master", "level": "ERROR", "timestamp": time.time(),
            "log": f"{refusal}\n"}])
        # The refusal is in the trial's log: its followers read it (the stop's effects follow).
        return Done(Reported(None, refusal),
                    experiment_changed(exp_id, fields["trial_id"])
                    | notify(f"logs:{fields['trial_id']}") | stopped)


STOPPABLE = (ExperimentState.ACTIVE.value, ExperimentState.PAUSED.value,
             ExperimentState.STOPPING_ERROR.value)


def _refusal(conn: sqlite3.Connection, quota: Quota, exp_id: int | None, grows: int,
             fields: dict[str, Any]) -> str | None:
    """Why a report adding `grows` bytes to experiment `exp_id` is refused, or None."""
    row = conn.execute(
        "SELECT e.owner_id, e.checkpoint_size, e.checkpoint_count, u.username "
        "FROM experiments e JOIN users u ON u.id = e.owner_id WHERE e.id=?",
        (exp_id,)).fetchone()
    if row is None:
        return None
    what = (f"checkpoint {fields['uuid']} of trial {fields['trial_id']} "
            f"({byte_size.human(grows)}) was refused:")
    used, count = row["checkpoint_size"], row["checkpoint_count"]
    limit, key = ((quota.per_experiment, "checkpoint_storage_quota in the master config")
                  if quota.per_experiment is not None else
                  (byte_size.MAX, "the most a master counts"))
    if used + grows > limit:
        return (f"{what} experiment {exp_id} would use {byte_size.human(used + grows)} of "
                f"checkpoint storage, over its quota of {byte_size.human(limit)} ({key}); it "
                f"holds {byte_size.human(used)} in {count} checkpoint(s). "
                f"{HOW_TO_FREE.replace('EXP_ID', str(exp_id))}")
    if quota.per_user is None:
        return None
    sizes = [r[0] for r in conn.execute(
        "SELECT checkpoint_size FROM experiments WHERE owner_id=? AND checkpoint_size > 0",
        (row["owner_id"],))]
    mine = sum(sizes)
    if mine + grows <= quota.per_user:
        return None
    return (f"{what} the experiments of user {row['username']} would use "
            f"{byte_size.human(mine + grows)} of checkpoint storage, over the quota of "
            f"{byte_size.human(quota.per_user)} per user (checkpoint_storage_quota_per_user "
            f"in the master config); they hold {byte_size.human(mine)} in {len(sizes)} "
            f"experiment(s), {byte_size.human(used)} of it in experiment {exp_id}. "
            f"{HOW_TO_FREE.replace('EXP_ID', str(exp_id))}")
