"""Trials and the allocations (attempts) that run them."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from dettui.errors import InvalidArgument, NotFound
from dettui.master.effects import Done, Effects, Kill, experiment_changed, notify
from dettui.master.store import logs as log_store
from dettui.master.store import page as pages
from dettui.master.store import users
from dettui.master.store.page import Page, Window
from dettui.master.store.records import Allocation, Trial, columns, container_id, in_chunks
from dettui.master.store.tx import command, step, transaction
from dettui.models import AllocationState, ExperimentState, TrialState

if TYPE_CHECKING:
    from dettui.master.tokens import Mint

FROM_TRIALS = f"SELECT {columns(Trial.COLUMNS)} FROM trials"
FROM_ALLOCATIONS = f"SELECT {columns(Allocation.COLUMNS)} FROM allocations"


def get(conn: sqlite3.Connection, trial_id: int) -> Trial:
    row = conn.execute(f"{FROM_TRIALS} WHERE id=?", (trial_id,)).fetchone()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    return Trial.from_row(row)


def by_task_id(conn: sqlite3.Connection, task_id: str) -> Trial:
    row = conn.execute(f"{FROM_TRIALS} WHERE task_id=?", (task_id,)).fetchone()
    if row is None:
        raise NotFound(f"task {task_id} not found")
    return Trial.from_row(row)


def for_experiment(conn: sqlite3.Connection, exp_id: int) -> list[Trial]:
    rows = conn.execute(f"{FROM_TRIALS} WHERE experiment_id=? ORDER BY id", (exp_id,))
    return [Trial.from_row(r) for r in rows]


def ids_of_experiment(conn: sqlite3.Connection, exp_id: int) -> list[int]:
    """An experiment's trial ids, in order (no record built: GET of an experiment asks for
    them at every look, and a search's 200th trial was made into 200 records each time)."""
    rows = conn.execute("SELECT id FROM trials WHERE experiment_id=? ORDER BY id", (exp_id,))
    return [int(r[0]) for r in rows]


def states_of_experiment(conn: sqlite3.Connection, exp_id: int) -> list[TrialState]:
    """The states an experiment's trials are in, each once (whether it has ended is a
    question of these, asked at every trial's end)."""
    rows = conn.execute("SELECT DISTINCT state FROM trials WHERE experiment_id=?", (exp_id,))
    return [TrialState(r[0]) for r in rows]


TRIAL_SORTS = {  # Determined's v1GetExperimentTrialsRequestSortBy -> the column
    "SORT_BY_UNSPECIFIED": "id", "SORT_BY_ID": "id", "SORT_BY_START_TIME": "start_time",
    "SORT_BY_END_TIME": "end_time", "SORT_BY_STATE": "state",
    "SORT_BY_BATCHES_PROCESSED": "total_batches", "SORT_BY_RESTARTS": "restarts",
}


def page(conn: sqlite3.Connection, exp_id: int, want: Page, *,
         states: list[str] | None = None, sort_by: str | None = None,
         ) -> tuple[list[Trial], Window]:
    """A page of an experiment's trials (by id unless `sort_by` says otherwise)."""
    column = TRIAL_SORTS.get(sort_by or "SORT_BY_UNSPECIFIED")
    if column is None:
        raise InvalidArgument(f"sortBy: unsupported value {str(sort_by)[:40]!r}; one of "
                              f"{', '.join(TRIAL_SORTS)}")
    where, args = "WHERE experiment_id=?", [exp_id]  # type: ignore[list-item]
    if states:
        where += f" AND state IN ({','.join('?' * len(states))})"
        args.extend(states)
    way = "DESC" if want.desc else "ASC"
    order = f"id {way}" if column == "id" else f"({column} IS NULL), {column} {way}, id {way}"
    rows, window = pages.read(conn, want, f"SELECT COUNT(*) FROM trials {where}",
                              f"{FROM_TRIALS} {where} ORDER BY {order}", args)
    return [Trial.from_row(r) for r in rows], window


def active(conn: sqlite3.Connection) -> tuple[list[tuple[int, int]], set[int]]:
    """What the job queue needs of trials, read through the trials_state index: (trial id,
    experiment id) of every RUNNING trial, and the experiments with a QUEUED one."""
    running = [(r[0], r[1]) for r in conn.execute(
        "SELECT id, experiment_id FROM trials WHERE state=?", (TrialState.RUNNING.value,))]
    queued = {r[0] for r in conn.execute(
        "SELECT DISTINCT experiment_id FROM trials WHERE state=?", (TrialState.QUEUED.value,))}
    return running, queued


def of_experiment(conn: sqlite3.Connection, exp_id: int, ids: list[int]) -> list[Trial]:
    """Those of `ids` that are trials of the experiment, by id."""
    out: list[Trial] = []
    for chunk, marks in in_chunks(ids):
        out += [Trial.from_row(r) for r in conn.execute(
            f"{FROM_TRIALS} WHERE experiment_id=? AND id IN ({marks})", (exp_id, *chunk))]
    return sorted(out, key=lambda t: t.id)


def for_experiments(conn: sqlite3.Connection, exp_ids: list[int]) -> list[Trial]:
    out: list[Trial] = []
    for chunk, marks in in_chunks(exp_ids):
        out += [Trial.from_row(r) for r in conn.execute(
            f"{FROM_TRIALS} WHERE experiment_id IN ({marks})", chunk)]
    return sorted(out, key=lambda t: t.id)


def running_of(conn: sqlite3.Connection, exp_ids: list[int]) -> list[tuple[int, int]]:
    """(trial id, experiment id) of the RUNNING trials of `exp_ids`, by id."""
    out: list[tuple[int, int]] = []
    for chunk, marks in in_chunks(exp_ids):
        out += [(r[0], r[1]) for r in conn.execute(
            f"SELECT id, experiment_id FROM trials WHERE state=? AND experiment_id IN ({marks})",
            (TrialState.RUNNING.value, *chunk))]
    return sorted(out)


def queued_counts(conn: sqlite3.Connection, exp_ids: list[int]) -> dict[int, int]:
    """How many QUEUED trials each experiment of `exp_ids` has (those with none are left out),
    counted in the trials_state index."""
    out: dict[int, int] = {}
    for chunk, marks in in_chunks(exp_ids):
        out.update((r[0], r[1]) for r in conn.execute(
            "SELECT experiment_id, COUNT(*) FROM trials WHERE state=? "
            f"AND experiment_id IN ({marks}) GROUP BY experiment_id",
            (TrialState.QUEUED.value, *chunk)))
    return out


def pending(conn: sqlite3.Connection) -> list[Trial]:
    """Trials waiting for slots: QUEUED, of an ACTIVE managed experiment."""
    rows = conn.execute(
        f"SELECT {columns(Trial.COLUMNS, 't')} FROM trials t "
        "JOIN experiments e ON e.id = t.experiment_id "
        "WHERE t.state=? AND e.state=? AND e.unmanaged=0 ORDER BY t.id",
        (TrialState.QUEUED.value, ExperimentState.ACTIVE.value),
    )
    return [Trial.from_row(r) for r in rows]


def experiment_ids(conn: sqlite3.Connection, trial_ids: list[int]) -> dict[int, int]:
    """trial id -> its experiment's id, for the trials of `trial_ids` that exist."""
    out: dict[int, int] = {}
    for chunk, marks in in_chunks(trial_ids):
        out.update((r[0], r[1]) for r in conn.execute(
            f"SELECT id, experiment_id FROM trials WHERE id IN ({marks})", chunk))
    return out


@step
def set_fields(conn: sqlite3.Connection, trial_id: int, **fields: Any) -> None:
    """A trial's own fields (progress, runner state, early exit...), inside the caller's
    transaction (`reports`)."""
    allowed = {"progress", "runner_state", "searcher_stopped", "restarts", "early_exit"}
    cols = {k: v for k, v in fields.items() if k in allowed}
    if cols:
        conn.execute(f"UPDATE trials SET {', '.join(f'{k}=?' for k in cols)} WHERE id=?",
                     (*cols.values(), trial_id))


def run_metadata(conn: sqlite3.Connection, trial_id: int) -> dict[str, Any]:
    """The trial's run metadata (`{}` until some is set)."""
    row = conn.execute("SELECT metadata FROM trials WHERE id=?", (trial_id,)).fetchone()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    return dict(json.loads(row["metadata"])) if row["metadata"] else {}


@command
def set_run_metadata(conn: sqlite3.Connection, trial_id: int,
                     metadata: dict[str, Any]) -> Done[dict[str, Any]]:
    """Replace the trial's run metadata (Determined overwrites it whole); what is stored."""
    with transaction(conn):
        if conn.execute("UPDATE trials SET metadata=? WHERE id=?",
                        (json.dumps(metadata), trial_id)).rowcount == 0:
            raise NotFound(f"trial {trial_id} not found")
        return Done(run_metadata(conn, trial_id))


# --- allocations ---------------------------------------------------------------------------


@step
def allocate(
    conn: sqlite3.Connection, trial_id: int, agent_id: str, slots: list[int],
    parts: list[tuple[str, list[int]]] | None = None, port: int | None = None, *,
    mint: Mint,
) -> Allocation | None:
    """Start a new run of the trial on `slots` of `agent_id` (or on every (agent, slots) of
    `parts`, chief first): run id + 1, its tokens (kept as hashes) and its owner's session.
    None, with nothing changed, if the trial is no longer waiting for slots (QUEUED, of an
    ACTIVE experiment): a pause, cancel or kill committed since the scheduling pass read it."""
    parts = parts or [(agent_id, slots)]
    with transaction(conn):
        trial = get(conn, trial_id)
        exp = conn.execute("SELECT state, owner_id FROM experiments WHERE id=?",
                           (trial.experiment_id,)).fetchone()
        if trial.state is not TrialState.QUEUED or exp is None or \
                exp["state"] != ExperimentState.ACTIVE.value:
            return None
        run_id = trial.run_id + 1
        alloc_id = f"{trial.task_id}.{run_id}"
        conn.execute("UPDATE trials SET run_id=?, state=? WHERE id=?",
                     (run_id, TrialState.RUNNING.value, trial_id))
        conn.execute(
            "INSERT INTO allocations (id, trial_id, run_id, state, token, agent_id, slots, "
            "start_time, parts, port) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (alloc_id, trial_id, run_id, AllocationState.ASSIGNED.value,
             users.token_hash(mint.allocation(alloc_id)), parts[0][0],
             json.dumps(parts[0][1]), time.time(),
             json.dumps([[a, list(s)] for a, s in parts]), port),
        )
        users.add_task_session(conn, exp["owner_id"], alloc_id, mint.task_user(alloc_id))
        log_store.insert_in(conn, [{  # where `t logs` shows one attempt end, the next begin
            "trial_id": trial_id, "task_id": trial.task_id, "allocation_id": alloc_id,
            "agent_id": parts[0][0], "stdtype": "stdout", "source": "master", "level": "INFO",
            "timestamp": time.time(), "log": start_marker(trial_id, run_id, parts)}])
    return allocation(conn, alloc_id)


def start_marker(trial_id: int, run_id: int, parts: list[tuple[str, list[int]]]) -> str:
    """The trial log's line that an attempt begins: `— attempt 2 of trial 5, on agent a1 —`."""
    agents = ", ".join(a for a, _ in parts)
    return f"— attempt {run_id} of trial {trial_id}, on agent{'s' if len(parts) > 1 else ''} " \
           f"{agents} —\n"


class Placement(NamedTuple):
    """Where a scheduling pass starts a trial: `slots` of `agent_id`, or every (agent, slots)
    of `parts` (chief first) with a rendezvous `port`."""

    trial_id: int
    agent_id: str
    slots: list[int]
    parts: list[tuple[str, list[int]]] | None = None
    port: int | None = None
    experiment_id: int | None = None  # the trial's, when the pass knows it


@command
def allocate_many(conn: sqlite3.Connection, placements: Sequence[Placement], *,
                  mint: Mint) -> Done[list[Allocation | None]]:
    """`allocate` for each of a scheduling pass's placements, in one call of the store thread
    (a pass that starts 100 trials queued 200 calls, each behind whatever the store was doing).
    Each start is still its own commit: how many commits a run makes does not depend on how
    its trials fell into passes (the crash-point harness replays a run commit by commit). A
    trial that stopped waiting since the pass read the queue gets None (and the queue is
    planned again); the others start: their start messages are sent."""
    allocs = [allocate(conn, *p[:5], mint=mint) for p in placements]
    out = Effects()
    for p, alloc in zip(placements, allocs, strict=True):
        if alloc is None:
            out |= Effects(kick=True, said=(f"trial {p.trial_id} stopped waiting before it "
                                            "could start",))
            continue
        exp_id = p.experiment_id if p.experiment_id is not None else \
            get(conn, p.trial_id).experiment_id
        out |= experiment_changed(exp_id, alloc.trial_id, jobs=True)
    return Done(allocs, out | Effects(starts=tuple(a.id for a in allocs if a is not None)))


def allocation(conn: sqlite3.Connection, alloc_id: str) -> Allocation:
    row = conn.execute(f"{FROM_ALLOCATIONS} WHERE id=?", (alloc_id,)).fetchone()
    if row is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return Allocation.from_row(row)


def allocation_by_token(conn: sqlite3.Connection, token: str) -> Allocation | None:
    row = conn.execute(f"{FROM_ALLOCATIONS} WHERE token=?",
                       (users.token_hash(token),)).fetchone()
    return Allocation.from_row(row) if row else None


def live_allocations(conn: sqlite3.Connection) -> list[Allocation]:
    rows = conn.execute(f"{FROM_ALLOCATIONS} WHERE state != ? ORDER BY start_time",
                        (AllocationState.EXITED.value,))
    return [Allocation.from_row(r) for r in rows]


def slots_in_use(conn: sqlite3.Connection) -> dict[str, dict[int, str]]:
    """Each agent's slots that live allocations hold, with the container id on each (what
    GET /api/v1/agents shows), read from the four columns that say it: at lab scale the
    stream's agents topic asks twice a second, and building all 800 live allocations whole
    for it took 30 ms under the GIL."""
    used: dict[str, dict[int, str]] = {}
    for r in conn.execute("SELECT id, agent_id, slots, parts FROM allocations "
                          "WHERE state != ? ORDER BY start_time",
                          (AllocationState.EXITED.value,)):
        parts = json.loads(r["parts"]) or [(r["agent_id"], json.loads(r["slots"]))]
        agents = [agent for agent, _ in parts]
        for agent, slots in parts:
            container = container_id(r["id"], agents.index(agent))
            mine = used.setdefault(agent, {})
            for slot in slots:
                mine[slot] = container
    return used


_PLAIN_ID = re.compile(r"[A-Za-z0-9._:@-]+")


def live_allocations_of_trial(conn: sqlite3.Connection, trial_id: int) -> list[Allocation]:
    """The trial's live allocations (at most one, but for a moment at a restart)."""
    rows = conn.execute(f"{FROM_ALLOCATIONS} WHERE trial_id=? AND state != ?",
                        (trial_id, AllocationState.EXITED.value))
    return [Allocation.from_row(r) for r in rows]


def live_allocations_in(conn: sqlite3.Connection, alloc_ids: list[str]) -> list[Allocation]:
    """Those of `alloc_ids` that are live."""
    out: list[Allocation] = []
    for start in range(0, len(alloc_ids), 500):
        chunk = alloc_ids[start:start + 500]
        rows = conn.execute(f"{FROM_ALLOCATIONS} WHERE state != ? AND id IN "
                            f"({','.join('?' * len(chunk))})",
                            [AllocationState.EXITED.value, *chunk])
        out += [Allocation.from_row(r) for r in rows]
    return out


def live_allocations_of(conn: sqlite3.Connection, agent_id: str) -> list[Allocation]:
    """The live allocations with a part on `agent_id` (what each heartbeat reconciles: reading
    all 800 live allocations of 100 agents per heartbeat was the master's hot spot)."""
    if not _PLAIN_ID.fullmatch(agent_id):  # no LIKE prefilter for ids with quotes or escapes
        return [a for a in live_allocations(conn) if agent_id in a.agents]
    rows = conn.execute(
        f"{FROM_ALLOCATIONS} WHERE state != ? AND (agent_id = ? OR parts LIKE ?) "
        "ORDER BY start_time",
        (AllocationState.EXITED.value, agent_id, f'%"{agent_id}"%'))
    return [a for a in (Allocation.from_row(r) for r in rows) if agent_id in a.agents]


def exits_reported(conn: sqlite3.Connection, agent_id: str, alloc_ids: list[str]) -> set[str]:
    """Of `alloc_ids`, those whose part on `agent_id` has reported its exit (the agent told
    the master itself: a heartbeat that still lists one crossed that report)."""
    found: set[str] = set()
    for start in range(0, len(alloc_ids), 500):
        chunk = alloc_ids[start:start + 500]
        rows = conn.execute(f"SELECT id, part_exits FROM allocations WHERE id IN "
                            f"({','.join('?' * len(chunk))})", chunk)
        found.update(r["id"] for r in rows if agent_id in json.loads(r["part_exits"]))
    return found


def allocations_for_trial(conn: sqlite3.Connection, trial_id: int) -> list[Allocation]:
    rows = conn.execute(f"{FROM_ALLOCATIONS} WHERE trial_id=? ORDER BY run_id", (trial_id,))
    return [Allocation.from_row(r) for r in rows]


# Transitions of a live allocation: each one commit, guarded so that an allocation that has
# exited (or moved on) is never put back; each has effects only when it changed anything.

_LIVE = f"WHERE id=? AND state != '{AllocationState.EXITED.value}'"


def _guarded(conn: sqlite3.Connection, sets: str, where: str, args: tuple[Any, ...]) -> bool:
    with transaction(conn):
        return conn.execute(f"UPDATE allocations SET {sets} {where}", args).rowcount > 0


@command
def request_kill(conn: sqlite3.Connection, alloc_id: str, reason: str) -> Effects:
    """The allocation is to be killed (TERMINATING, `kill_requested`); nothing if it has
    exited."""
    if not _guarded(conn, "kill_requested=1, state=?", _LIVE,
                    (AllocationState.TERMINATING.value, alloc_id)):
        return Effects()
    alloc = allocation(conn, alloc_id)
    return Effects(kills=(Kill(alloc.id, tuple(a for a in alloc.agents
                                                if a not in alloc.part_exits), reason),))


@command
def request_preempt(conn: sqlite3.Connection, alloc_id: str) -> Effects:
    """The allocation is asked to checkpoint and exit; nothing if it has exited."""
    if not _guarded(conn, "preempt_requested=1", _LIVE, (alloc_id,)):
        return Effects()
    return Effects(preempted=(alloc_id,))


@command
def ack_preempt(conn: sqlite3.Connection, alloc_id: str) -> Effects:
    """The trial acknowledged its preemption (its exit is then not a failure); nothing if the
    allocation has exited."""
    _guarded(conn, "preempt_acked=1", _LIVE, (alloc_id,))
    return Effects()


@command
def mark_running(conn: sqlite3.Connection, *alloc_ids: str) -> Effects:
    """The agent runs these allocations: each ASSIGNED one becomes RUNNING, a commit each (as
    every transition), in one store call (not one that is no longer ASSIGNED: killed
    meanwhile, or exited); followers of their trials re-read them."""
    running = [a for a in alloc_ids
               if _guarded(conn, "state=?", "WHERE id=? AND state=?",
                           (AllocationState.RUNNING.value, a, AllocationState.ASSIGNED.value))]
    if not running:
        return Effects()
    return notify(*(f"trial:{a.trial_id}" for a in live_allocations_in(conn, running)))


def trials_of_live_allocations(conn: sqlite3.Connection) -> dict[str, int]:
    """Each live allocation's trial, by allocation id: GET /api/v1/agents says which trial
    each slot's container runs (two columns read, as `slots_in_use`)."""
    return {str(r["id"]): int(r["trial_id"])
            for r in conn.execute("SELECT id, trial_id FROM allocations WHERE state != ?",
                                  (AllocationState.EXITED.value,))}
