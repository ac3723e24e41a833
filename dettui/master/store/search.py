"""The searcher's side of the store: its state saved with the trials it creates and stops.

Every event (a validation, a trial's end) is applied in one transaction: load the state, run
the pure searcher, insert the trials it creates, mark the ones it stops, save the state. Each
trial's last validation seen is part of the state, so a master killed between a metric's commit
and the searcher's can replay what it missed (`catch_up`) without applying anything twice.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from dettui import jsonfast
from dettui.config.schema import ExperimentSchema
from dettui.master import searcher as search
from dettui.master.effects import Effects, experiment_changed, notify
from dettui.master.searcher import sanity
from dettui.master.store import ids
from dettui.master.store import logs as log_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Experiment, Trial, typed_config
from dettui.master.store.tx import step
from dettui.models import AllocationState, ExperimentState, TrialState

_ROWS_AT_ONCE = 100  # rows of one INSERT (9 values each: far below SQLite's 32,766 variables)
SEEN = "_seen_steps"  # per search id: the last validation step applied
ENDED = "_ended"  # search ids whose end was applied


@dataclass
class Outcome:
    created: list[int] = field(default_factory=list)  # trial ids
    stopped: list[int] = field(default_factory=list)  # trial ids the searcher stopped
    preempt: list[str] = field(default_factory=list)  # their running allocations, now flagged
    ended: list[int] = field(default_factory=list)  # stopped before they ran: now COMPLETED
    error: str | None = None

    def merge(self, other: Outcome) -> None:
        self.created += other.created
        self.stopped += other.stopped
        self.preempt += other.preempt
        self.ended += other.ended
        self.error = self.error or other.error


def _searcher(conn: sqlite3.Connection, exp: Experiment) -> tuple[search.Searcher,
                                                                    dict[str, Any]]:
    state, extra = _state(conn, exp.id)
    return search.for_experiment(exp.conf, state), extra


def _state(conn: sqlite3.Connection,
           exp_id: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The searcher's stored state, and what of it is ours: steps seen, ends applied."""
    row = conn.execute("SELECT searcher_state FROM experiments WHERE id=?", (exp_id,)).fetchone()
    state = jsonfast.loads(row[0]) if row and row[0] else None  # at every validation and end
    extra = {SEEN: dict((state or {}).get(SEEN, {})), ENDED: list((state or {}).get(ENDED, []))}
    return state, extra


def _save(conn: sqlite3.Connection, exp_id: int, s: search.Searcher,
          extra: dict[str, Any], *, progress: bool = False) -> None:
    """The searcher's state; with `progress`, the experiment's progress from it. As
    Determined's master, progress is computed when a trial reports its own (not when one
    ends: an ERROR or CANCELED experiment keeps what it had reached), is 1 once the
    experiment COMPLETED (`exits.finish_experiment`) and 0 again when it is continued."""
    if not progress:
        conn.execute("UPDATE experiments SET searcher_state=? WHERE id=?",
                     (json.dumps({**s.snapshot(), **extra}), exp_id))
        return
    value = s.progress(_trial_progress(conn, exp_id))
    conn.execute("UPDATE experiments SET searcher_state=?, progress=? WHERE id=?",
                 (json.dumps({**s.snapshot(), **extra}), value, exp_id))


def _trial_progress(conn: sqlite3.Connection, exp_id: int) -> dict[int, float]:
    rows = conn.execute("SELECT search_id, progress FROM trials WHERE experiment_id=? AND "
                        "search_id IS NOT NULL", (exp_id,))
    return {int(r[0]): float(r[1] or 0.0) for r in rows}


@step
def insert_trials(conn: sqlite3.Connection, exp_id: int, trial_ids: list[int],
                  trials: list[tuple[str, str, int, int | None]], state: TrialState,
                  now: float) -> list[int]:
    """Insert an experiment's new trials as `trial_ids` (from `ids`): each (request id,
    hparams JSON, seed, search id), a statement per 100 of them; their ids."""
    rows = [(tid, exp_id, request_id, f"{exp_id}.{request_id}", hparams, seed, state.value,
             now, search_id)
            for tid, (request_id, hparams, seed, search_id) in zip(trial_ids, trials,
                                                                   strict=True)]
    for start in range(0, len(rows), _ROWS_AT_ONCE):
        chunk = rows[start:start + _ROWS_AT_ONCE]
        conn.execute("INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, "
                     "state, start_time, search_id, summary_stale) VALUES "  # no report yet: kept
                     + ",".join(["(?,?,?,?,?,?,?,?,?,0)"] * len(chunk)),
                     [v for row in chunk for v in row])
    return trial_ids


@dataclass(frozen=True)
class Opening:
    """A new experiment's first trials and its searcher's state, worked out before its
    transaction: a fresh searcher reads nothing stored, so this runs where the request is read
    (a worker process), and the store thread only inserts what it gives."""

    trials: list[tuple[str, str, int, int | None]]  # (request id, hparams JSON, seed, search id)
    state: str | None = None  # the searcher's state, as stored (None: no searcher)
    progress: float | None = None

    @classmethod
    def of(cls, trials: list[tuple[dict[str, Any], int]]) -> Opening:
        """Given (hparams, seed) trials, with no searcher."""
        return cls([(str(uuid.uuid4()), json.dumps(hp), seed, None) for hp, seed in trials])


def opening(conf: ExperimentSchema) -> Opening:
    """The searcher of `conf`, new: its first trials and the state to save with them."""
    s = search.for_experiment(conf)
    creates = [a for a in s.initial() if isinstance(a, search.Create)]
    return Opening([(str(uuid.uuid4()), json.dumps(c.hparams), c.seed, c.request_id)
                    for c in creates],
                   json.dumps({**s.snapshot(), SEEN: {}, ENDED: []}),
                   s.progress({c.request_id: 0.0 for c in creates}))


def _apply(conn: sqlite3.Connection, exp: Experiment, actions: list[search.Action]) -> Outcome:
    out = Outcome()
    state = TrialState.QUEUED if exp.state is ExperimentState.ACTIVE else TrialState.PAUSED
    now = time.time()
    trial_ids = iter(ids.next_ids(conn, "trials",
                                  sum(isinstance(a, search.Create) for a in actions)))
    for action in actions:
        if isinstance(action, search.Create):
            out.created += insert_trials(conn, exp.id, [next(trial_ids)], [
                (str(uuid.uuid4()), json.dumps(action.hparams), action.seed, action.request_id)],
                state, now)
            continue
        row = conn.execute("SELECT id, state FROM trials WHERE experiment_id=? AND search_id=?",
                           (exp.id, action.request_id)).fetchone()
        if row is None:
            continue
        conn.execute("UPDATE trials SET searcher_stopped=1 WHERE id=?", (row[0],))
        if TrialState(row[1]) in (TrialState.QUEUED, TrialState.PAUSED):
            # Not running: nothing to checkpoint, it is simply done.
            conn.execute("UPDATE trials SET state=?, end_time=? WHERE id=?",
                         (TrialState.COMPLETED.value, now, row[0]))
            out.ended.append(int(row[0]))
        live = [r[0] for r in conn.execute(
            "SELECT id FROM allocations WHERE trial_id=? AND state != ? AND preempt_requested=0",
            (row[0], AllocationState.EXITED.value))]
        conn.executemany("UPDATE allocations SET preempt_requested=1 WHERE id=?",
                         [(a,) for a in live])
        out.preempt += live
        out.stopped.append(int(row[0]))
    return out


def _follow(conn: sqlite3.Connection, exp: Experiment, out: Outcome) -> Outcome:
    """The trials a searcher ended without running are ends the searcher takes in too (which
    may end others): all in the caller's transaction."""
    todo = list(out.ended)
    while todo:
        more = _end(conn, exp, trial_store.get(conn, todo.pop()))
        out.merge(more)
        todo += more.ended
    return out


def _accepts_events(exp: Experiment) -> bool:
    return not exp.unmanaged and exp.state in (ExperimentState.ACTIVE, ExperimentState.PAUSED)


@step
def apply_validation(conn: sqlite3.Connection, exp: Experiment, trial: Trial, steps: int,
                     metrics: dict[str, Any]) -> Outcome:
    """A validation of `trial` (inside the caller's transaction)."""
    if trial.search_id is None or not _accepts_events(exp):
        return Outcome()
    return _follow(conn, exp, _validation(conn, exp, trial, steps, metrics))


def _validation(conn: sqlite3.Connection, exp: Experiment, trial: Trial, steps: int,
                metrics: dict[str, Any]) -> Outcome:
    s, extra = _searcher(conn, exp)
    key = str(trial.search_id)
    if steps <= int(extra[SEEN].get(key, -1)):
        return Outcome()
    extra[SEEN][key] = steps
    try:
        actions = s.validation(int(trial.search_id), metrics)
    except search.SearcherError as exc:
        _save(conn, exp.id, s, extra)
        return Outcome(error=str(exc))
    out = _apply(conn, exp, actions)
    _save(conn, exp.id, s, extra)
    return out


@step
def apply_end(conn: sqlite3.Connection, exp: Experiment, trial: Trial) -> Outcome:
    """A trial reached COMPLETED, ERROR or CANCELED (inside the caller's transaction)."""
    if trial.search_id is None or not _accepts_events(exp):
        return Outcome()
    return _follow(conn, exp, _end(conn, exp, trial))


def _end(conn: sqlite3.Connection, exp: Experiment, trial: Trial) -> Outcome:
    s, extra = _searcher(conn, exp)
    rid = int(trial.search_id or 0)
    if rid in extra[ENDED]:
        return Outcome()
    extra[ENDED].append(rid)
    if trial.early_exit in ("EXITED_REASON_INVALID_HP", "EXITED_REASON_INIT_INVALID_HP"):
        actions = s.exited_early(rid, search.ExitReason.INVALID_HP)
    elif trial.state is TrialState.COMPLETED:
        actions = s.exited(rid)
    elif trial.state is TrialState.CANCELED:
        actions = s.exited_early(rid, search.ExitReason.CANCELED)
    else:
        actions = s.exited_early(rid, search.ExitReason.ERRORED)
    out = _apply(conn, exp, actions)
    _save(conn, exp.id, s, extra)
    return out


@step
def catch_up(conn: sqlite3.Connection, exp: Experiment) -> Outcome:
    """Replay validations and trial ends the searcher has not seen, from before a crash
    (inside the caller's transaction)."""
    total = Outcome()
    if not _accepts_events(exp):
        return total
    # What the searcher has seen, read once: only what it has not is read and replayed (every
    # validation of every live experiment, parsed at each start-up, took minutes at 1M).
    _, extra = _state(conn, exp.id)
    seen, ended = extra[SEEN], set(extra[ENDED])
    for trial in trial_store.for_experiment(conn, exp.id):
        if trial.search_id is None:
            continue
        rows = conn.execute(
            "SELECT steps_completed, metrics FROM metrics WHERE trial_id=? AND "
            "grp='validation' AND archived=0 AND steps_completed>? ORDER BY steps_completed",
            (trial.id, int(seen.get(str(trial.search_id), -1))))
        for steps, metrics in rows.fetchall():
            total.merge(_follow(conn, exp, _validation(conn, exp, trial, int(steps),
                                                       json.loads(metrics))))
        if int(trial.search_id) in ended:
            continue  # (a searcher's end only adds to it)
        fresh = trial_store.get(conn, trial.id)
        if fresh.state.is_terminal():
            total.merge(_follow(conn, exp, _end(conn, exp, fresh)))
    return total


@step
def refresh_progress(conn: sqlite3.Connection, exp: Experiment) -> None:
    """The experiment's progress from its searcher and trials (inside the caller's
    transaction)."""
    if exp.unmanaged:
        return
    s, extra = _searcher(conn, exp)
    _save(conn, exp.id, s, extra, progress=True)


@step
def reopen(conn: sqlite3.Connection, exp: Experiment, trial_ids: list[int]) -> None:
    """An experiment continued: its trials that run again are open to its searcher again
    (their ends are applied anew when they end), so its progress counts them as running,
    not done (inside the caller's transaction)."""
    if exp.unmanaged:
        return
    s, extra = _searcher(conn, exp)
    rows = [trial_store.get(conn, t) for t in trial_ids]
    again = {int(t.search_id) for t in rows if t.search_id is not None}
    for rid in again:
        s.reopen(rid)
    extra[ENDED] = [r for r in extra[ENDED] if int(r) not in again]
    _save(conn, exp.id, s, extra)


@step
def check_validation(conn: sqlite3.Connection, trial_id: int, steps: int,
                     metrics: dict[str, Any]) -> Effects:
    """Search sanity for a validation of a managed trial (inside its report's transaction):
    one that lacks what its searcher reads warns on its experiment and, the first time for
    this trial, in the trial's logs."""
    row = conn.execute(
        "SELECT t.experiment_id, t.task_id, t.metric_warned, e.config, e.unmanaged "
        "FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.id=?",
        (trial_id,)).fetchone()
    if row is None or row["unmanaged"]:
        return Effects()
    config = typed_config(row["config"]).searcher
    what = sanity.missing(config, metrics)
    if not what:
        return Effects()
    exp_id = int(row["experiment_id"])
    told = Effects()
    for item in what:
        told |= add_warning(conn, exp_id, sanity.lacking(config, metrics, item,
                                                         warnings(conn, exp_id)))
    if row["metric_warned"]:
        return told
    conn.execute("UPDATE trials SET metric_warned=1 WHERE id=?", (trial_id,))
    line = "; ".join(sanity.lacking(config, metrics, item) for item in what)
    return told | trial_log(conn, trial_id, row["task_id"],
                            sanity.trial_line(trial_id, steps, line))


def warnings(conn: sqlite3.Connection, exp_id: int) -> list[str]:
    """The experiment's stored warnings."""
    row = conn.execute("SELECT warnings FROM experiments WHERE id=?", (exp_id,)).fetchone()
    return json.loads(row[0]) if row and row[0] else []


@step
def add_warning(conn: sqlite3.Connection, exp_id: int, text: str) -> Effects:
    """Keep `text` among the experiment's warnings, in place of the one of its kind (at most
    sanity.MAX_WARNINGS)."""
    now = sanity.added(warnings(conn, exp_id), text)
    if now is None:
        return Effects()
    conn.execute("UPDATE experiments SET warnings=? WHERE id=?", (json.dumps(now), exp_id))
    return experiment_changed(exp_id)


@step
def trial_log(conn: sqlite3.Connection, trial_id: int, task_id: str, line: str, *,
              level: str = "WARNING") -> Effects:
    """A line from the master in the trial's logs (where `det t logs` shows it)."""
    log_store.insert_in(conn, [{"trial_id": trial_id, "task_id": task_id,
                                "stdtype": "stderr", "source": "master", "level": level,
                                "timestamp": time.time(), "log": line}])
    return notify(f"logs:{trial_id}")
