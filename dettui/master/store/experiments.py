"""Experiments (each one is also a job in the queue) and their model contexts."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dettui.errors import FailedPrecondition, InvalidArgument, NotFound
from dettui.master.checkpoint_policy import GcPolicy
from dettui.master.effects import Done, Effects, experiment_changed
from dettui.master.store import ids, search
from dettui.master.store import page as pages
from dettui.master.store.page import Page, Window
from dettui.master.store.records import (
    IN_CHUNK,
    JOB_COLUMNS,
    Experiment,
    Job,
    JobView,
    ListedExperiment,
    Trial,
    columns,
    in_chunks,
)
from dettui.master.store.tx import command, transaction
from dettui.models import ExperimentState, TrialState

FROM_TRIALS = f"SELECT {columns(Trial.COLUMNS)} FROM trials"

COLUMNS = ("id", "name", "description", "labels", "state", "archived", "owner_id", "config",
           "original_config", "searcher_type", "job_id", "resource_pool", "priority", "weight",
           "max_slots", "queue_position", "start_time", "end_time", "progress", "unmanaged",
           "external_id", "best_value", "best_trial_id", "checkpoint_size", "checkpoint_count",
           "warnings")
E = TypeVar("E", Experiment, ListedExperiment)
_PIECE = 4 * 2**20  # bytes of a large context written into its row at a time
NUM_TRIALS = "(SELECT COUNT(*) FROM trials t WHERE t.experiment_id = e.id)"
SELECT = (  # every column a record needs, by name: never the context (its own table)
    f"SELECT {', '.join('e.' + c for c in COLUMNS)}, u.username, {NUM_TRIALS} AS num_trials "
    "FROM experiments e JOIN users u ON u.id = e.owner_id"
)
LISTED = (  # what a list without configs shows (ListedExperiment): no original_config
    f"SELECT {', '.join('e.' + c for c in COLUMNS if c != 'original_config')}, u.username, "
    f"{NUM_TRIALS} AS num_trials FROM experiments e JOIN users u ON u.id = e.owner_id"
)


@dataclass(frozen=True)
class NewExperiment:
    name: str
    description: str | None
    labels: list[str]
    owner_id: int
    config: dict[str, Any]
    original_config: str
    searcher_type: str
    resource_pool: str
    priority: int
    weight: float
    max_slots: int | None
    context: bytes | None
    activate: bool = True
    unmanaged: bool = False


def not_found(exp_id: int) -> NotFound:
    return NotFound(f"experiment '{exp_id}' not found")


@command
def create(
    conn: sqlite3.Connection, new: NewExperiment,
    trials: list[tuple[dict[str, Any], int]] | None = None, *,
    opening: search.Opening | None = None,
) -> Done[tuple[Experiment, list[int]]]:
    """Store the experiment, its first trials and its job, in one commit: the given
    (hparams, seed) pairs, or the searcher's `opening` (its first trials and state, worked
    out before: `search.opening`). The experiment and its trials' ids."""
    made = create_many(conn, [(new, opening or search.Opening.of(trials or []))])
    return Done(made.value[0], made.effects)


@command
def create_many(conn: sqlite3.Connection, news: Sequence[tuple[NewExperiment, search.Opening]],
                ) -> Done[list[tuple[Experiment, list[int]]]]:
    """Experiments asked for together (while the store thread was busy: a group commit), each
    stored as `create` stores one, all in one commit: one reservation of ids, a few statements
    each and one read of them back, where one at a time took ten statements and a commit
    each. An error fails them all (none is stored). Followers of each are told, and the
    scheduler looks at the queue."""
    if not news:
        return Done([])
    with transaction(conn):
        given = ids.reserve(conn, {"experiments": len(news),
                                   "trials": sum(len(first.trials) for _, first in news)})
        trial_ids = iter(given["trials"])
        made = []
        for exp_id, (new, first) in zip(given["experiments"], news, strict=True):
            mine = [next(trial_ids) for _ in first.trials]
            _insert(conn, exp_id, new, first, mine)
            made.append(mine)
        exps = {e.id: e for e in of_ids(conn, given["experiments"])}
    told = Effects(kick=True)
    for exp_id in given["experiments"]:
        told |= experiment_changed(exp_id, jobs=True)
    return Done([(exps[exp_id], mine) for exp_id, mine in zip(given["experiments"], made,
                                                              strict=True)], told)


def _insert(conn: sqlite3.Connection, exp_id: int, new: NewExperiment, first: search.Opening,
            trial_ids: list[int]) -> None:
    now = time.time()
    state = ExperimentState.ACTIVE if new.activate else ExperimentState.PAUSED
    trial_state = TrialState.QUEUED if new.activate else TrialState.PAUSED
    conn.execute(
        "INSERT INTO experiments (id, name, description, labels, state, owner_id, config, "
        "original_config, searcher_type, job_id, resource_pool, priority, weight, max_slots, "
        "queue_position, start_time, unmanaged, best_stale, slots_per_trial, "
        "searcher_state, progress) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,?,?,?)",
        (exp_id, new.name, new.description,
         json.dumps(new.labels), state.value, new.owner_id, json.dumps(new.config),
         new.original_config, new.searcher_type, str(uuid.uuid4()), new.resource_pool,
         new.priority, new.weight, new.max_slots, now * 1e6, now, int(new.unmanaged),
         slots_of(new.config), first.state, first.progress),
    )
    if new.context is not None:
        _put_context(conn, exp_id, new.context)
    search.insert_trials(conn, exp_id, trial_ids, first.trials, trial_state, now)


def _put_context(conn: sqlite3.Connection, exp_id: int, targz: bytes) -> None:
    """Store a context. On SQLite a large one is written into its row in pieces: bound whole,
    SQLite would first copy all of it (95 MiB more of the master's memory at once)."""
    if getattr(conn, "dialect", "sqlite") != "sqlite" or len(targz) <= _PIECE:
        conn.execute("INSERT INTO contexts (experiment_id, targz) VALUES (?, ?)",
                     (exp_id, targz))
        return
    conn.execute("INSERT INTO contexts (experiment_id, targz) VALUES (?, zeroblob(?))",
                 (exp_id, len(targz)))
    view = memoryview(targz)
    with conn.blobopen("contexts", "targz", exp_id) as blob:
        for start in range(0, len(view), _PIECE):
            blob.write(view[start:start + _PIECE])


@command
def add_trial(
    conn: sqlite3.Connection, exp_id: int, hparams: dict[str, Any], seed: int,
    state: TrialState = TrialState.QUEUED,
) -> Done[Trial]:
    """One more trial of the experiment, with these hparams and seed."""
    with transaction(conn):
        tid, = search.insert_trials(conn, exp_id, [ids.next_id(conn, "trials")],
                                    search.Opening.of([(hparams, seed)]).trials, state,
                                    time.time())
    return Done(_trial(conn, tid), experiment_changed(exp_id, tid, jobs=True)
                | Effects(kick=True))


def _trial(conn: sqlite3.Connection, trial_id: int) -> Trial:
    return Trial.from_row(conn.execute(f"{FROM_TRIALS} WHERE id=?", (trial_id,)).fetchone())


def get(conn: sqlite3.Connection, exp_id: int) -> Experiment:
    row = conn.execute(f"{SELECT} WHERE e.id=?", (exp_id,)).fetchone()
    if row is None:
        raise not_found(exp_id)
    return Experiment.from_row(row)


def count(conn: sqlite3.Connection) -> int:
    """How many experiments there are (the one workspace's count)."""
    return int(conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0])


def by_job_id(conn: sqlite3.Connection, job_id: str) -> Experiment:
    row = conn.execute(f"{SELECT} WHERE e.job_id=?", (job_id,)).fetchone()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return Experiment.from_row(row)


EXPERIMENT_SORTS = {  # Determined's v1GetExperimentsRequestSortBy -> the column it orders by
    "SORT_BY_UNSPECIFIED": "e.id", "SORT_BY_ID": "e.id", "SORT_BY_NAME": "e.name",
    "SORT_BY_DESCRIPTION": "e.description", "SORT_BY_START_TIME": "e.start_time",
    "SORT_BY_END_TIME": "e.end_time", "SORT_BY_STATE": "e.state",
    "SORT_BY_PROGRESS": "e.progress", "SORT_BY_USER": "u.username",
    "SORT_BY_RESOURCE_POOL": "e.resource_pool", "SORT_BY_NUM_TRIALS": NUM_TRIALS,
    "SORT_BY_SEARCHER_METRIC_VAL": "e.best_value", "SORT_BY_FORKED_FROM": "e.id",
    "SORT_BY_PROJECT_ID": "e.id",  # never forked, all in one project
    "SORT_BY_CHECKPOINT_SIZE": "e.checkpoint_size",
    "SORT_BY_CHECKPOINT_COUNT": "e.checkpoint_count",
}


def _filters(archived: bool | None, users: list[str] | None, states: list[str] | None,
             ids: list[int] | None) -> tuple[str, list[Any]]:
    where, args = [], []  # type: ignore[var-annotated]
    if ids is not None:
        where.append(f"e.id IN ({','.join('?' * len(ids))})")
        args.extend(ids)
    if archived is not None:
        where.append("e.archived=?")
        args.append(int(archived))
    if users:
        where.append(f"u.username IN ({','.join('?' * len(users))})")
        args.extend(users)
    if states:
        where.append(f"e.state IN ({','.join('?' * len(states))})")
        args.extend(states)
    return (" WHERE " + " AND ".join(where) if where else ""), args


def list_(
    conn: sqlite3.Connection, *, archived: bool | None = None, users: list[str] | None = None,
    states: list[str] | None = None, ids: list[int] | None = None,
) -> list[Experiment]:
    where, args = _filters(archived, users, states, ids)
    return [Experiment.from_row(r) for r in conn.execute(f"{SELECT}{where} ORDER BY e.id",
                                                           args)]


def page(
    conn: sqlite3.Connection, want: Page, *, archived: bool | None = None,
    users: list[str] | None = None, states: list[str] | None = None,
    sort_by: str | None = None,
) -> tuple[list[Experiment], Window]:
    """A page of the experiments list (by id unless `sort_by` names another column; values
    missing last), with the window Determined's pagination reports."""
    ids, window = page_ids(conn, want, archived=archived, users=users, states=states,
                           sort_by=sort_by)
    return _in_order(ids, of_ids(conn, ids)), window


def listed_page(
    conn: sqlite3.Connection, want: Page, *, archived: bool | None = None,
    users: list[str] | None = None, states: list[str] | None = None,
    sort_by: str | None = None,
) -> tuple[list[ListedExperiment], Window]:
    """`page` as a list without configs shows it (ListedExperiment)."""
    ids, window = page_ids(conn, want, archived=archived, users=users, states=states,
                           sort_by=sort_by)
    return _in_order(ids, listed(conn, ids)), window


def _in_order(ids: list[int], found: list[E]) -> list[E]:
    """The experiments `found` (read by id) in the order of `ids`, a page's."""
    place = {exp_id: i for i, exp_id in enumerate(ids)}
    return sorted(found, key=lambda e: place[e.id])


def listed(conn: sqlite3.Connection, ids: list[int] | None = None) -> list[ListedExperiment]:
    """Every experiment (or those of `ids` that exist), archived ones too, by id, as a list
    without configs shows them."""
    if ids is None:
        return [ListedExperiment.from_row(r) for r in conn.execute(f"{LISTED} ORDER BY e.id")]
    found: list[ListedExperiment] = []
    for chunk, marks in in_chunks(sorted(ids)):
        found += [ListedExperiment.from_row(r) for r in conn.execute(
            f"{LISTED} WHERE e.id IN ({marks}) ORDER BY e.id", chunk)]
    return found


def page_ids(
    conn: sqlite3.Connection, want: Page, *, archived: bool | None = None,
    users: list[str] | None = None, states: list[str] | None = None,
    sort_by: str | None = None,
) -> tuple[list[int], Window]:
    """The ids of `page`'s experiments, in its order, and its window."""
    column = EXPERIMENT_SORTS.get(sort_by or "SORT_BY_UNSPECIFIED")
    if column is None:
        raise InvalidArgument(f"sortBy: unknown value {str(sort_by)[:40]!r}; one of "
                              f"{', '.join(EXPERIMENT_SORTS)}")
    where, args = _filters(archived, users, states, None)
    way = "DESC" if want.desc else "ASC"
    order = f"e.id {way}" if column == "e.id" else \
        f"({column} IS NULL), {column} {way}, e.id {way}"
    # The page's ids first, from the narrow experiments_list index (a walk of the rows, each
    # with its config, took 8 ms at offset 9,900 of 10,000), then only its rows.
    joined = users or column.startswith("u.")  # filtered or sorted by the owner's name
    table = "experiments e JOIN users u ON u.id = e.owner_id" if joined else "experiments e"
    keys, window = pages.read(conn, want, f"SELECT COUNT(*) FROM {table}{where}",
                              f"SELECT e.id FROM {table}{where} ORDER BY {order}", args)
    return [k[0] for k in keys], window


def live_where() -> tuple[str, list[str]]:
    """Not terminal, as `state IN (...)` (the experiments_state index serves it), managed."""
    alive = [s.value for s in ExperimentState if not s.is_terminal()]
    return f"e.state IN ({','.join('?' * len(alive))}) AND e.unmanaged=0", alive


def live(conn: sqlite3.Connection) -> list[Experiment]:
    """Experiments that are jobs in the queue (not terminal). Unmanaged (detached) experiments
    are never jobs: their scripts run outside the cluster."""
    where, args = live_where()
    rows = conn.execute(f"{SELECT} WHERE {where} ORDER BY e.id", args)
    return [Experiment.from_row(r) for r in rows]


def live_jobs(conn: sqlite3.Connection) -> dict[int, Job]:
    """The live experiments as the scheduler sees them, by id: columns only (a scheduling pass
    runs after every change; decoding 10,000 configs each time made it the master's hot spot)."""
    where, args = live_where()
    return {r[0]: Job.from_row(r) for r in conn.execute(
        f"SELECT {columns(JOB_COLUMNS, 'e')} FROM experiments e WHERE {where}", args)}


def job_views(conn: sqlite3.Connection, exp_ids: list[int]) -> list[JobView]:
    """The experiments of `exp_ids` as the job queue shows them (no config read)."""
    out: list[JobView] = []
    for chunk, marks in in_chunks(exp_ids):
        out += [JobView.from_row(r) for r in conn.execute(
            f"SELECT {columns(JobView.COLUMNS, 'e')}, u.username FROM experiments e "
            f"JOIN users u ON u.id = e.owner_id WHERE e.id IN ({marks})", chunk)]
    return out


def slots_of(config: dict[str, Any]) -> int:
    """A stored config's slots per trial (the full expconf: the key is always there)."""
    return int((config.get("resources") or {}).get("slots_per_trial", 1))


def live_keys(conn: sqlite3.Connection, pool: str | None = None,
              ) -> list[tuple[int, int, float]]:
    """(id, priority, queue position) of the live experiments (of `pool`): what orders the
    queue, without reading their configs."""
    where, args = live_where()
    if pool:
        where += " AND e.resource_pool=?"
        args.append(pool)
    return [(r[0], r[1], r[2]) for r in conn.execute(
        f"SELECT e.id, e.priority, e.queue_position FROM experiments e WHERE {where}", args)]


def queue_views(conn: sqlite3.Connection, page: Page, pool: str | None = None,
                with_requests: bool = False) -> tuple[list[JobView], Window]:
    """A page of the live experiments (of `pool`; `with_requests`: only those with a trial
    queued or running, Determined's queue) as the job queue shows them, in queue order
    (priority, queue position, id; reversed for a descending page): a walk of the
    experiments_queue index, which holds every column a job shows. The table's rows are not
    read (each holds its config and searcher state, which spill to overflow pages that a read
    of the columns after them goes through: 2,000 jobs took 11 ms that way, 5 ms now)."""
    where, args = live_where()
    if pool:
        where += " AND e.resource_pool=?"
        args.append(pool)
    if with_requests:
        where += (" AND EXISTS (SELECT 1 FROM trials t WHERE t.experiment_id = e.id"
                  " AND t.state IN (?, ?))")
        args += [TrialState.QUEUED.value, TrialState.RUNNING.value]
    d = " DESC" if page.desc else ""
    # SQLite without statistics walks the state index and sorts; the queue's index it must
    # walk (PostgreSQL's planner picks it from its own statistics).
    table = ("experiments e INDEXED BY experiments_queue"
             if getattr(conn, "dialect", "sqlite") == "sqlite" else "experiments e")
    rows, window = pages.read(
        conn, page, f"SELECT COUNT(*) FROM {table} WHERE {where}",
        f"SELECT {columns(JobView.COLUMNS, 'e')}, u.username FROM {table} "
        f"JOIN users u ON u.id = e.owner_id WHERE {where} "
        f"ORDER BY e.priority{d}, e.queue_position{d}, e.id{d}", args)
    return [JobView.from_row(r) for r in rows], window


def of_ids(conn: sqlite3.Connection, exp_ids: list[int]) -> list[Experiment]:
    """The experiments of `exp_ids` that exist, by id (read in chunks of bound parameters)."""
    out: list[Experiment] = []
    for i in range(0, len(exp_ids), IN_CHUNK):
        out += list_(conn, ids=exp_ids[i:i + IN_CHUNK])
    return out


def context(conn: sqlite3.Connection, exp_id: int) -> bytes | None:
    """The experiment's model context (.tar.gz), the one read of the contexts table."""
    row = conn.execute("SELECT e.id, c.targz FROM experiments e LEFT JOIN contexts c "
                       "ON c.experiment_id = e.id WHERE e.id=?", (exp_id,)).fetchone()
    if row is None:
        raise not_found(exp_id)
    return bytes(row["targz"]) if row["targz"] is not None else None


FIELDS = {"name", "description", "labels", "priority", "weight", "max_slots", "resource_pool",
          "queue_position", "progress"}  # the plain columns `update_fields` sets


@command
def update_fields(conn: sqlite3.Connection, exp_id: int, *, gc_policy: GcPolicy | None = None,
                  **fields: Any) -> Done[Experiment]:
    """Set plain columns (name, description, labels, priority, weight, ...: FIELDS) and, with
    `gc_policy`, the GC policy of the experiment's config, in one commit. A policy applies at
    once: the experiment's collection is due (`gc_pending`, done by the dispatcher with the
    policy stored here). Followers are told and the scheduler looks at the queue again."""
    cols = {k: v for k, v in fields.items() if k in FIELDS}
    if not cols and gc_policy is None:
        return Done(get(conn, exp_id))
    with transaction(conn):
        if gc_policy is not None:
            cols["config"] = _with_policy(get(conn, exp_id).config, gc_policy)
            cols["gc_pending"] = 1
        sets = ", ".join(f"{k}=?" for k in cols)
        values = [json.dumps(v) if k in ("labels", "config") else v for k, v in cols.items()]
        if conn.execute(f"UPDATE experiments SET {sets} WHERE id=?",
                        (*values, exp_id)).rowcount == 0:
            raise not_found(exp_id)
        exp = get(conn, exp_id)
    collect = Effects(collect=(exp_id,)) if gc_policy is not None else Effects()
    return Done(exp, experiment_changed(exp_id, jobs=True) | Effects(kick=True) | collect)


MAX_LABELS = 100  # labels on one experiment


@command
def change_label(conn: sqlite3.Connection, exp_id: int, label: str,
                 add: bool) -> Done[list[str]]:
    """Add `label` to the experiment's labels (kept once, in the order added) or remove it;
    the labels after. Followers are told."""
    with transaction(conn):
        labels = list(get(conn, exp_id).labels)
        if add and label not in labels:
            if len(labels) >= MAX_LABELS:
                raise InvalidArgument(f"an experiment has at most {MAX_LABELS} labels")
            labels.append(label)
        elif not add and label in labels:
            labels.remove(label)
        else:
            return Done(labels)
        conn.execute("UPDATE experiments SET labels=? WHERE id=?", (json.dumps(labels), exp_id))
    return Done(labels, experiment_changed(exp_id))


def _with_policy(config: dict[str, Any], policy: GcPolicy) -> dict[str, Any]:
    """`config` with its checkpoint storage's save_* set to `policy`'s."""
    storage = {**(config.get("checkpoint_storage") or {}),
               "save_experiment_best": policy.save_experiment_best,
               "save_trial_best": policy.save_trial_best,
               "save_trial_latest": policy.save_trial_latest}
    return {**config, "checkpoint_storage": storage}


@command
def set_archived(conn: sqlite3.Connection, exp_id: int, archived: bool) -> Effects:
    """Archive an ended experiment (it leaves the default lists), or bring one back; the
    experiment's state is checked in the same transaction."""
    with transaction(conn):
        exp = get(conn, exp_id)
        if archived and not exp.state.is_terminal():
            raise FailedPrecondition("Experiment is not in terminal state.")
        if archived and exp.archived:
            raise FailedPrecondition("Experiment is already archived.")
        if not archived and not exp.archived:
            raise FailedPrecondition("Experiment is not archived.")
        conn.execute("UPDATE experiments SET archived=? WHERE id=?", (int(archived), exp_id))
    return experiment_changed(exp_id, jobs=True)


def require_ended(exp: Experiment) -> None:
    """Only an ended experiment is deleted: FailedPrecondition otherwise."""
    if not exp.state.is_terminal():
        raise FailedPrecondition(
            f"experiment {exp.id} is {exp.state.short}: only an ended experiment (completed, "
            f"canceled or errored) can be deleted; cancel or kill it first")


@command
def begin_delete(conn: sqlite3.Connection, exp_id: int) -> Effects:
    """The first of a deletion's two commits: an ended experiment is marked `deleting`, so that
    no `continue` makes it run again while its checkpoint files go (then `delete` removes its
    records). A deletion a crash cut between the two is finished at start-up
    (`pending_deletions`)."""
    with transaction(conn):
        require_ended(get(conn, exp_id))
        conn.execute("UPDATE experiments SET deleting=1 WHERE id=?", (exp_id,))
    return experiment_changed(exp_id)


def pending_deletions(conn: sqlite3.Connection) -> list[int]:
    """Experiments marked `deleting` whose records are still here (a crash cut the deletion)."""
    return [r[0] for r in conn.execute("SELECT id FROM experiments WHERE deleting=1 ORDER BY id")]


def is_deleting(conn: sqlite3.Connection, exp_id: int) -> bool:
    row = conn.execute("SELECT deleting FROM experiments WHERE id=?", (exp_id,)).fetchone()
    return bool(row and row[0])


@command
def delete(conn: sqlite3.Connection, exp_id: int) -> Effects:
    """Remove an ended experiment marked `deleting` (`begin_delete`) and everything of it
    (trials, allocations, metrics, logs, checkpoint records) in one transaction. Its checkpoint
    files go between the two (the caller); the mark keeps it ended meanwhile."""
    trials = "SELECT id FROM trials WHERE experiment_id=?"
    with transaction(conn):
        require_ended(get(conn, exp_id))
        if not is_deleting(conn, exp_id):
            raise FailedPrecondition(f"experiment {exp_id} is not being deleted")
        conn.execute(f"DELETE FROM logs WHERE trial_id IN ({trials}) OR task_id IN "
                     "(SELECT task_id FROM trials WHERE experiment_id=?)", (exp_id, exp_id))
        conn.execute(f"DELETE FROM metrics WHERE trial_id IN ({trials})", (exp_id,))
        conn.execute(f"DELETE FROM trial_source_infos WHERE trial_id IN ({trials}) OR "
                     "checkpoint_uuid IN (SELECT uuid FROM checkpoints WHERE experiment_id=? "
                     f"OR trial_id IN ({trials}))", (exp_id, exp_id, exp_id))
        conn.execute(f"DELETE FROM allocations WHERE trial_id IN ({trials})", (exp_id,))
        conn.execute(f"DELETE FROM checkpoints WHERE experiment_id=? OR trial_id IN ({trials})",
                     (exp_id, exp_id))
        conn.execute("DELETE FROM trials WHERE experiment_id=?", (exp_id,))
        conn.execute("DELETE FROM contexts WHERE experiment_id=?", (exp_id,))
        conn.execute("DELETE FROM experiments WHERE id=?", (exp_id,))
    return experiment_changed(exp_id, jobs=True)
