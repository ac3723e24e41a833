"""Checkpoint records, and each experiment's checkpoint usage with them.

An experiment's row keeps the bytes and the number of its checkpoints that hold files
(COMPLETED or PARTIALLY_DELETED: `checkpoint_size`, `checkpoint_count`, as Determined's), changed
in the same transaction as every report, re-report, deletion and GC here, so a list shows them
and a quota checks them without reading a checkpoint. A report's bytes are the sizes it lists
(what the Core API measured of the files it wrote).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from dettui import byte_size
from dettui.errors import Conflict, NotFound
from dettui.master.effects import Done, Effects, notify
from dettui.master.store import page as pages
from dettui.master.store.page import Page, Window
from dettui.master.store.records import Checkpoint, columns
from dettui.master.store.tx import command, step, transaction
from dettui.models import CheckpointState

FROM_CHECKPOINTS = f"SELECT {columns(Checkpoint.COLUMNS)} FROM checkpoints"


def growth(conn: sqlite3.Connection, uuid: str, trial_id: int | None, task_id: str,
           resources: dict[str, str]) -> int:
    """Inside a transaction: the bytes a report of `resources` under `uuid` adds to its
    experiment's usage (a re-report: the difference; it keeps the state it has). Conflict
    if another trial's checkpoint has the uuid."""
    row = conn.execute("SELECT trial_id, task_id, state, resources FROM checkpoints "
                       "WHERE uuid=?", (uuid,)).fetchone()
    if row is None:
        return held(CheckpointState.COMPLETED.value, resources)
    if (row["trial_id"], row["task_id"]) != (trial_id, task_id):
        raise Conflict(f"checkpoint {uuid} already belongs to another trial")
    old = json.loads(row["resources"] or "{}")
    return held(row["state"], resources) - held(row["state"], old)


@step
def record(
    conn: sqlite3.Connection, *, uuid: str, trial_id: int | None, experiment_id: int | None,
    task_id: str, allocation_id: str | None, report_time: float, resources: dict[str, str],
    metadata: dict[str, Any], storage_id: int | None,
) -> None:
    """Inside a transaction, once `growth` has checked the uuid: the checkpoint's row, and
    its experiment's usage with it."""
    steps = metadata.get("steps_completed")
    prior = conn.execute("SELECT state, resources FROM checkpoints WHERE uuid=?",
                         (uuid,)).fetchone()
    conn.execute(
        "INSERT INTO checkpoints (uuid, trial_id, experiment_id, task_id, allocation_id, "
        "report_time, state, resources, metadata, steps_completed, storage_id) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(uuid) DO UPDATE SET "
        "resources=excluded.resources, metadata=excluded.metadata, "
        "steps_completed=excluded.steps_completed",
        (uuid, trial_id, experiment_id, task_id, allocation_id, report_time,
         CheckpointState.COMPLETED.value, json.dumps(resources), json.dumps(metadata),
         int(steps) if isinstance(steps, int | float) else None, storage_id),
    )
    if prior is None:
        _use(conn, experiment_id, held(CheckpointState.COMPLETED.value, resources), 1)
    else:
        old = json.loads(prior["resources"] or "{}")
        _use(conn, experiment_id,
             held(prior["state"], resources) - held(prior["state"], old), 0)


KEPT = (CheckpointState.COMPLETED.value, CheckpointState.PARTIALLY_DELETED.value)


def held(state: str, resources: dict[str, str]) -> int:
    """The bytes a checkpoint in `state` with these files holds in storage: its files' sizes
    while it is COMPLETED or PARTIALLY_DELETED (sizes that are not plain decimal strings
    count 0; the sum at most byte_size.MAX)."""
    if state not in KEPT:
        return 0
    return min(sum(byte_size.file_size(v) for v in resources.values()), byte_size.MAX)


def _use(conn: sqlite3.Connection, experiment_id: int | None, size: int, count: int) -> None:
    """Inside a transaction: add to the experiment's checkpoint usage (kept within 0 and
    byte_size.MAX, so the column stays an int64 whatever reports claim)."""
    if experiment_id is None or (size == 0 and count == 0):
        return
    row = conn.execute("SELECT checkpoint_size, checkpoint_count FROM experiments WHERE id=?",
                       (experiment_id,)).fetchone()
    if row is None:
        return
    conn.execute("UPDATE experiments SET checkpoint_size=?, checkpoint_count=? WHERE id=?",
                 (min(max(row[0] + size, 0), byte_size.MAX), max(row[1] + count, 0),
                  experiment_id))


def get(conn: sqlite3.Connection, uuid: str) -> Checkpoint:
    row = conn.execute(f"{FROM_CHECKPOINTS} WHERE uuid=?", (uuid,)).fetchone()
    if row is None:
        raise NotFound(f"checkpoint {uuid} not found")
    return Checkpoint.from_row(row)


def for_experiment(conn: sqlite3.Connection, exp_id: int) -> list[Checkpoint]:
    rows = conn.execute(
        f"{FROM_CHECKPOINTS} WHERE experiment_id=? ORDER BY report_time", (exp_id,)
    )
    return [Checkpoint.from_row(r) for r in rows]


CHECKPOINT_SORTS = {  # Determined's checkpointv1SortBy attributes -> the column
    "SORT_BY_UNSPECIFIED": "report_time", "SORT_BY_END_TIME": "report_time",
    "SORT_BY_UUID": "uuid", "SORT_BY_TRIAL_ID": "trial_id",
    "SORT_BY_BATCH_NUMBER": "steps_completed", "SORT_BY_STATE": "state",
}


def _where(experiment_id: int | None, trial_id: int | None,
           states: Sequence[str]) -> tuple[str, list[Any]]:
    where, args = ("experiment_id=?", [experiment_id]) if trial_id is None else \
        ("trial_id=?", [trial_id])
    if states:
        where += f" AND state IN ({','.join('?' * len(states))})"
        args.extend(states)
    return where, args


def matching(conn: sqlite3.Connection, *, experiment_id: int | None = None,
             trial_id: int | None = None, states: Sequence[str] = ()) -> list[Checkpoint]:
    """The checkpoints of an experiment (or of a trial) in these states, by report time."""
    where, args = _where(experiment_id, trial_id, states)
    rows = conn.execute(f"{FROM_CHECKPOINTS} WHERE {where} ORDER BY report_time, uuid", args)
    return [Checkpoint.from_row(r) for r in rows]


def page(conn: sqlite3.Connection, want: Page, *, experiment_id: int | None = None,
         trial_id: int | None = None, states: Sequence[str] = (),
         sort_attr: str = "SORT_BY_UNSPECIFIED") -> tuple[list[Checkpoint], Window]:
    """A page of an experiment's (or a trial's) checkpoints ordered by an attribute (missing
    values last; equal ones by report time), read with LIMIT/OFFSET."""
    column = CHECKPOINT_SORTS[sort_attr]
    where, args = _where(experiment_id, trial_id, states)
    way = "DESC" if want.desc else "ASC"
    if column in ("trial_id", "steps_completed"):  # may be NULL: those last
        order = f"({column} IS NULL), {column} {way}, report_time, uuid"
    else:
        order = f"{column} {way}" + (f", uuid {way}" if column == "report_time" else
                                      ", report_time, uuid")
    rows, window = pages.read(conn, want, f"SELECT COUNT(*) FROM checkpoints WHERE {where}",
                              f"{FROM_CHECKPOINTS} WHERE {where} ORDER BY {order}", args)
    return [Checkpoint.from_row(r) for r in rows], window


def for_trial(conn: sqlite3.Connection, trial_id: int) -> list[Checkpoint]:
    rows = conn.execute(f"{FROM_CHECKPOINTS} WHERE trial_id=? ORDER BY report_time",
                        (trial_id,))
    return [Checkpoint.from_row(r) for r in rows]


def latest_for_trial(conn: sqlite3.Connection, trial_id: int) -> Checkpoint | None:
    """The COMPLETED checkpoint with the most steps (SEMANTICS §3.4)."""
    row = conn.execute(
        f"{FROM_CHECKPOINTS} WHERE trial_id=? AND state=? "
        "ORDER BY steps_completed DESC NULLS LAST, report_time DESC LIMIT 1",
        (trial_id, CheckpointState.COMPLETED.value),
    ).fetchone()
    return Checkpoint.from_row(row) if row else None


@command
def set_resources_many(conn: sqlite3.Connection,
                       changes: list[tuple[str, dict[str, str]]]) -> Effects:
    """Record the files left of each checkpoint, all or none (NotFound names the first unknown
    uuid). As Determined's: none left is DELETED; files left are PARTIALLY_DELETED only if
    they changed (a refresh that finds them all keeps the state). Followers of their
    experiments are told."""
    exps: dict[int, None] = {}
    with transaction(conn):
        for uuid, resources in changes:
            row = conn.execute("SELECT resources, state, experiment_id FROM checkpoints "
                               "WHERE uuid=?", (uuid,)).fetchone()
            if row is None:
                raise NotFound(f"checkpoint {uuid} not found")
            was = json.loads(row["resources"] or "{}")
            old = dict(was)
            if "metadata.json" in resources:  # older reports may not list it
                old.setdefault("metadata.json", resources["metadata.json"])
            state = (CheckpointState.DELETED.value if not resources else row["state"]
                     if old == resources else CheckpointState.PARTIALLY_DELETED.value)
            conn.execute("UPDATE checkpoints SET resources=?, state=? WHERE uuid=?",
                         (json.dumps(resources), state, uuid))
            _use(conn, row["experiment_id"],
                 held(state, resources) - held(row["state"], was),
                 (state in KEPT) - (row["state"] in KEPT))
            if row["experiment_id"] is not None:
                exps[row["experiment_id"]] = None
    return notify(*(f"experiment:{e}" for e in exps))


@command
def set_metadata(conn: sqlite3.Connection, uuid: str,
                 metadata: dict[str, Any]) -> Done[Checkpoint]:
    """Replace the checkpoint's metadata record (Determined's PostCheckpointMetadata: the
    metadata.json in storage is not changed); its step count stays the reported one.
    Followers of its experiment are told."""
    with transaction(conn):
        if conn.execute("UPDATE checkpoints SET metadata=? WHERE uuid=?",
                        (json.dumps(metadata), uuid)).rowcount == 0:
            raise NotFound(f"checkpoint {uuid} not found")
    ckpt = get(conn, uuid)
    told = notify(f"experiment:{ckpt.experiment_id}") if ckpt.experiment_id is not None \
        else Effects()
    return Done(ckpt, told)


SOURCE_KINDS = ("TRIAL_SOURCE_INFO_TYPE_UNSPECIFIED", "TRIAL_SOURCE_INFO_TYPE_INFERENCE",
                "TRIAL_SOURCE_INFO_TYPE_FINE_TUNING")


@command
def link_trial(conn: sqlite3.Connection, trial_id: int, uuid: str, kind: str,
               model_id: int | None = None, model_version: int | None = None) -> Effects:
    """Record that the trial uses the checkpoint (a repeated report updates the link)."""
    with transaction(conn):
        if conn.execute("SELECT 1 FROM checkpoints WHERE uuid=?", (uuid,)).fetchone() is None:
            raise NotFound(f"checkpoint {uuid} not found")
        if conn.execute("SELECT 1 FROM trials WHERE id=?", (trial_id,)).fetchone() is None:
            raise NotFound(f"trial {trial_id} not found")
        conn.execute(
            "INSERT INTO trial_source_infos (trial_id, checkpoint_uuid, kind, model_id, "
            "model_version) VALUES (?,?,?,?,?) ON CONFLICT(trial_id, checkpoint_uuid) DO "
            "UPDATE SET kind=excluded.kind, model_id=excluded.model_id, "
            "model_version=excluded.model_version",
            (trial_id, uuid, kind, model_id, model_version))
    return Effects()


def linked_trials(conn: sqlite3.Connection, uuid: str, kind: str | None = None) -> list[int]:
    """The trials that reported using the checkpoint (of that kind), by id."""
    sql, args = "SELECT trial_id FROM trial_source_infos WHERE checkpoint_uuid=?", [uuid]
    if kind is not None:
        sql += " AND kind=?"
        args.append(kind)
    return [r[0] for r in conn.execute(sql + " ORDER BY trial_id", args)]
