"""Metric reports, with Determined's merge and restart-rollback rules (SEMANTICS §3.2).

A report is capped before it is stored (`check_report`, run where its body is parsed): its
avgMetrics, and each entry of its batchMetrics, hold at most MAX_METRIC_KEYS values (a nested
object's keys and a list's items count as well), and all of its metrics at most
MAX_REPORT_BYTES of text. One report of 300,000 keys stalled the master for 7 s, and its
trial's summary then read back as 33 MB. A trial's summary (what its view shows) keeps the
first MAX_SUMMARY_METRICS names of each group: reports with new names are stored whole, but
the summary does not grow past that, however many reports add names.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dettui import jsonfast, metric
from dettui.errors import DettuiError, InvalidArgument, NotFound
from dettui.master import summary
from dettui.master.effects import Done, Effects, experiment_changed, notify
from dettui.master.searcher import sanity
from dettui.master.store import control, exits
from dettui.master.store import search as search_store
from dettui.master.store.records import IN_CHUNK, Metric, columns, in_chunks, typed_config
from dettui.master.store.tx import command, step, transaction
from dettui.models import ExperimentState

FROM_METRICS = f"SELECT {columns(Metric.COLUMNS)} FROM metrics"
STALE_BUDGET = 0.05  # seconds of the store thread a chunk of a start-up backfill takes
MAX_METRIC_KEYS = 1_000  # values in a report's avgMetrics (and in each batchMetrics entry)
MAX_REPORT_BYTES = 1024 * 1024  # text of a report's metrics: keys, strings, 8 bytes a number
MAX_REPORT_BODY = 2 * MAX_REPORT_BYTES  # a request body of one report
MAX_SUMMARY_METRICS = 1_000  # names a trial's summary keeps per group


def check_report(metrics: dict[str, Any]) -> None:
    """Refuse a report's `metrics` (`{"avgMetrics": ..., "batchMetrics": [...]}`) over its
    caps (InvalidArgument naming the cap). The walk stops at the first cap passed: it costs
    at most MAX_METRIC_KEYS values a dict, MAX_REPORT_BYTES in all."""
    _check_count(len(metrics), "metrics")
    size = 0
    for name, value in metrics.items():
        size += len(name)
        if name in ("batchMetrics", "batch_metrics") and isinstance(value, list):
            _check_count(len(value), f"metrics.{name}")
            for i, entry in enumerate(value):
                size += _check_values(entry, f"metrics.{name}[{i}]", MAX_REPORT_BYTES - size)
        else:
            size += _check_values(value, f"metrics.{name}", MAX_REPORT_BYTES - size)


def _check_count(count: int, where: str) -> None:
    if count > MAX_METRIC_KEYS:
        raise InvalidArgument(f"{where}: more than {MAX_METRIC_KEYS:,} metrics in one report "
                              "(the keys of nested objects and the items of lists count too)")


def _check_values(top: object, where: str, room: int) -> int:
    """The text size of `top`, refused when it holds over MAX_METRIC_KEYS values or more
    than `room` bytes of text (counted before a dict or list is walked: no work grows with
    what is refused)."""
    count, size = 0, len(top) if isinstance(top, str) else 2
    stack = [top]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict | list):
            continue
        count += len(node)
        _check_count(count, where)
        pairs = node.items() if isinstance(node, dict) else (("", v) for v in node)
        for key, value in pairs:
            size += len(key) + (len(value) if isinstance(value, str) else 8)
            if isinstance(value, dict | list):
                stack.append(value)
        if size > room:
            raise InvalidArgument(f"{where}: a report's metrics are over the limit of "
                                  f"{MAX_REPORT_BYTES:,} bytes")
    return size


@dataclass(frozen=True)
class MetricReport:
    """One report of a trial's metrics (Determined's ReportTrialMetrics)."""

    trial_id: int
    run_id: int
    group: str
    steps: int
    report_time: float
    metrics: dict[str, Any]
    batch_metrics: list[dict[str, Any]] | None = None


@command
def report(
    conn: sqlite3.Connection, *, trial_id: int, run_id: int, group: str, steps: int,
    report_time: float, metrics: dict[str, Any], batch_metrics: list[dict[str, Any]] | None,
) -> Effects:
    """One report, stored alone: not fed to the searcher (as older versions stored them; the
    master's route goes through `report_many`)."""
    with transaction(conn):
        _report(conn, MetricReport(trial_id, run_id, group, steps, report_time, metrics,
                                   batch_metrics))
    return notify(f"metrics:{trial_id}")


@command
def report_many(conn: sqlite3.Connection,
                reports: Sequence[MetricReport]) -> Done[list[DettuiError | None]]:
    """Reports of any trials in one transaction (a group commit), each checked against its
    trial's current run and applied under a savepoint of its own: a report that is refused
    (its error in the list) leaves the others in. A validation reaches the searcher in the
    same transaction (`exits.validation`): its stops, creations and the experiment's end."""
    errors: list[DettuiError | None] = []
    effects = Effects()
    merges: set[int] = set()  # trials a report was merged into: their summaries refreshed once
    with transaction(conn):
        for r in reports:
            conn.execute("SAVEPOINT report")
            try:
                row = conn.execute("SELECT run_id FROM trials WHERE id=?",
                                   (r.trial_id,)).fetchone()
                if row is None:
                    raise NotFound(f"trial {r.trial_id} not found")
                if r.run_id != row[0]:
                    raise InvalidArgument(
                        f"invalid run id, {r.run_id} (reported) != {row[0]} (expected)")
                _report(conn, r, merges)
                told = notify(f"metrics:{r.trial_id}")
                if r.group == "validation":
                    told |= search_store.check_validation(conn, r.trial_id, r.steps, r.metrics)
                    fed = exits.validation(conn, r.trial_id, r.steps, r.metrics)
                    told |= fed.effects
                    if fed.value:
                        told |= _cannot_rank(conn, r.trial_id, fed.value)
            except DettuiError as exc:
                conn.execute("ROLLBACK TO report")
                errors.append(exc)
            else:
                errors.append(None)
                effects |= told | _trial_changed(conn, r.trial_id)
            conn.execute("RELEASE report")
        for trial_id in sorted(merges):
            refresh_trial(conn, trial_id)
    return Done(errors, effects)


_RUNS = (ExperimentState.ACTIVE.value, ExperimentState.PAUSED.value)


def _cannot_rank(conn: sqlite3.Connection, trial_id: int, error: str) -> Effects:
    """The searcher could not use a validation (an adaptive search without its metric or
    time metric): as Determined's master, the experiment stops in ERROR, the reason on it and
    in the trial's logs."""
    row = conn.execute("SELECT t.experiment_id, t.task_id, e.state, e.unmanaged FROM trials t "
                       "JOIN experiments e ON e.id = t.experiment_id WHERE t.id=?",
                       (trial_id,)).fetchone()
    reason = sanity.cannot_rank(error)
    told = Effects(said=(f"trial {trial_id}: {error}",))
    if row is None or row["unmanaged"] or row["state"] not in _RUNS:
        return told
    exp_id = int(row["experiment_id"])
    return (told | search_store.add_warning(conn, exp_id, reason)
            | search_store.trial_log(conn, trial_id, row["task_id"], f"{reason}\n",
                                     level="ERROR")
            | control.stop_in(conn, exp_id, ExperimentState.STOPPING_ERROR))


def _trial_changed(conn: sqlite3.Connection, trial_id: int) -> Effects:
    row = conn.execute("SELECT experiment_id FROM trials WHERE id=?", (trial_id,)).fetchone()
    return experiment_changed(int(row[0]), trial_id)


def _report(conn: sqlite3.Connection, r: MetricReport, merges: set[int] | None = None) -> None:
    """Store a report, or merge it into its step's (refreshing the trial's summary then, or,
    given `merges`, adding the trial to those the caller refreshes once)."""
    trial_id, run_id, group, steps = r.trial_id, r.run_id, r.group, r.steps
    _rollback_older_runs(conn, trial_id, run_id, group, steps)
    row = conn.execute(
        "SELECT id, metrics, batch_metrics FROM metrics WHERE trial_id=? AND run_id=? "
        "AND grp=? AND steps_completed=? AND archived=0",
        (trial_id, run_id, group, steps),
    ).fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO metrics (trial_id, run_id, grp, steps_completed, report_time, "
            "metrics, batch_metrics) VALUES (?,?,?,?,?,?,?)",
            (trial_id, run_id, group, steps, r.report_time, json.dumps(r.metrics),
             json.dumps(r.batch_metrics) if r.batch_metrics is not None else None),
        )
        _fold_summary(conn, trial_id, group, steps, r.metrics)
    else:
        merged = _merge(jsonfast.loads(row["metrics"]), r.metrics)
        if len(merged) > MAX_METRIC_KEYS:
            raise InvalidArgument(
                f"more than {MAX_METRIC_KEYS:,} metrics in the {group} reports at step {steps} "
                "(reports of one step are merged, and their keys count together)")
        if r.batch_metrics is not None and row["batch_metrics"] is not None:
            raise InvalidArgument("overwriting batch metrics is not supported")
        bm = row["batch_metrics"] if r.batch_metrics is None else json.dumps(r.batch_metrics)
        conn.execute("UPDATE metrics SET metrics=?, batch_metrics=? WHERE id=?",
                     (json.dumps(merged), bm, row["id"]))
        if merges is None:
            refresh_trial(conn, trial_id)  # a merge changes a stored report: folded again
        else:
            merges.add(trial_id)  # (once per trial at the end of the caller's group)
    conn.execute("UPDATE trials SET total_batches=CASE WHEN total_batches < ? THEN ? "
                 "ELSE total_batches END WHERE id=?", (steps, steps, trial_id))
    if group == "validation":
        _update_best(conn, trial_id, r.metrics)


def _update_best(conn: sqlite3.Connection, trial_id: int, metrics: dict[str, Any]) -> None:
    """A validation may be its experiment's new best (dettui.metric's rules): O(1), unless the
    experiment's best is stale (then it is computed once from every validation)."""
    row = conn.execute(
        "SELECT e.id, e.config, e.best_value, e.best_stale FROM experiments e "
        "JOIN trials t ON t.experiment_id = e.id WHERE t.id=?", (trial_id,)).fetchone()
    if row is None:
        return
    if row["best_stale"]:
        refresh_best(conn, row["id"])
        return
    searcher = typed_config(row["config"]).searcher
    value = metric.number(metrics, searcher.metric)
    if metric.improves(value, row["best_value"], searcher.smaller_is_better):
        conn.execute("UPDATE experiments SET best_value=?, best_trial_id=? WHERE id=?",
                     (value, trial_id, row["id"]))


def _fold_summary(conn: sqlite3.Connection, trial_id: int, group: str, steps: int,
                  metrics: dict[str, Any]) -> None:
    """A new report folded into its trial's summary, and maybe the trial's best validation:
    O(metrics in the report), not O(reports of the trial)."""
    row = conn.execute(
        "SELECT t.summary_metrics, t.summary_stale, t.best_value, e.config FROM trials t "
        "JOIN experiments e ON e.id = t.experiment_id WHERE t.id=?", (trial_id,)).fetchone()
    if row is None:
        return
    if row["summary_stale"]:
        refresh_trial(conn, trial_id)
        return
    folded = jsonfast.loads(row["summary_metrics"]) if row["summary_metrics"] else {}
    kept = folded.setdefault(summary.PATHS.get(group, group), {})
    summary.fold(kept, _with_room(kept, metrics))
    conn.execute("UPDATE trials SET summary_metrics=? WHERE id=?",
                 (json.dumps(folded), trial_id))
    if group != "validation":
        return
    searcher = typed_config(row["config"]).searcher
    value = metric.number(metrics, searcher.metric)
    if metric.improves(value, row["best_value"], searcher.smaller_is_better):
        conn.execute("UPDATE trials SET best_value=?, best_steps=? WHERE id=?",
                     (value, steps, trial_id))


@step
def refresh_trial(conn: sqlite3.Connection, trial_id: int) -> None:
    """A trial's summary and best validation from all its live reports (in the caller's
    transaction): after a merge, after a restart archived some, for older versions' rows."""
    row = conn.execute("SELECT e.config FROM trials t JOIN experiments e "
                       "ON e.id = t.experiment_id WHERE t.id=?", (trial_id,)).fetchone()
    if row is None:
        return
    searcher = typed_config(row["config"]).searcher
    folded = summary.summarize(_summarised(reports(conn, trial_id)))
    found = metric.best(validations_with(conn, [trial_id], searcher.metric),
                        lambda m: metric.number(m.metrics, searcher.metric),
                        searcher.smaller_is_better)
    conn.execute(
        "UPDATE trials SET summary_metrics=?, best_value=?, best_steps=?, summary_stale=0 "
        "WHERE id=?",
        (json.dumps(folded) if folded else None,
         None if found is None else metric.number(found.metrics, searcher.metric),
         None if found is None else found.steps_completed, trial_id))


def _with_room(known: Collection[str], metrics: dict[str, Any]) -> dict[str, Any]:
    """`metrics` but for the new names a summary that has `known` has no room for."""
    room = MAX_SUMMARY_METRICS - len(known)
    new = [name for name in metrics if name not in known]
    if len(new) <= room:
        return metrics
    keep = set(new[:max(room, 0)])
    return {k: v for k, v in metrics.items() if k in known or k in keep}


def _summarised(rows: Iterable[tuple[str, dict[str, Any]]]
                ) -> Iterator[tuple[str, dict[str, Any]]]:
    """(group, metrics) reports as the summary takes them: the first MAX_SUMMARY_METRICS names
    of each group (`_with_room`, as `_fold_summary` keeps them)."""
    names: dict[str, set[str]] = {}
    for group, metrics in rows:
        known = names.setdefault(group, set())
        metrics = _with_room(known, metrics)
        known.update(metrics)
        yield group, metrics


def trial_summaries(conn: sqlite3.Connection,
                    trial_ids: Sequence[int]) -> dict[int, tuple[dict[str, Any] | None,
                                                                 int | None]]:
    """Each trial's (summary metrics, steps of its best validation), kept by the reports."""
    out: dict[int, tuple[dict[str, Any] | None, int | None]] = {}
    for chunk, marks in in_chunks(trial_ids):
        for r in conn.execute(
                f"SELECT id, summary_metrics, best_steps FROM trials WHERE id IN ({marks})",
                chunk):
            out[r[0]] = (jsonfast.loads(r[1]) if r[1] else None, r[2])
    return out


@command
def refresh_stale_trials(conn: sqlite3.Connection, after: int = 0,
                         budget: float = STALE_BUDGET) -> Done[tuple[int, int | None]]:
    """The summaries of trials stored by older versions (or whose rows were written around the
    master), from trial id `after` on, in one transaction of at most about `budget` seconds:
    (how many were computed, the id to go on after, or None when none is left)."""
    return Done(_refresh_stale(conn, "trials", "summary_stale", refresh_trial, after, budget))


def _refresh_stale(conn: sqlite3.Connection, table: str, flag: str,
                   refresh: Callable[[sqlite3.Connection, int], None], after: int,
                   budget: float) -> tuple[int, int | None]:
    """`refresh` the rows of `table` flagged stale, by id from `after`, until `budget` seconds
    have gone (at least one row): a backfill the start-up runs chunk by chunk while the master
    serves, so that no request waits behind more than one chunk."""
    def stale_ids() -> list[int]:
        return [r[0] for r in conn.execute(
            f"SELECT id FROM {table} WHERE {flag}=1 AND id>? ORDER BY id LIMIT 20", (after,))]

    if not stale_ids():
        return 0, None  # (no empty commit: nothing was stale)
    deadline = time.monotonic() + budget
    done = 0
    with transaction(conn):
        while ids := stale_ids():
            for row_id in ids:
                refresh(conn, row_id)
                done += 1
                after = row_id
                if time.monotonic() >= deadline:
                    return done, after
    return done, None


@step
def refresh_best(conn: sqlite3.Connection, exp_id: int) -> None:
    """Compute an experiment's best validation from all of them (in the caller's transaction):
    for rows of older versions, and after a restart archived some."""
    row = conn.execute("SELECT config FROM experiments WHERE id=?", (exp_id,)).fetchone()
    searcher = typed_config(row["config"]).searcher
    trial_ids = [r[0] for r in conn.execute("SELECT id FROM trials WHERE experiment_id=?",
                                            (exp_id,))]
    found = metric.best(validations_with(conn, trial_ids, searcher.metric),
                        lambda m: metric.number(m.metrics, searcher.metric),
                        searcher.smaller_is_better)
    conn.execute("UPDATE experiments SET best_value=?, best_trial_id=?, best_stale=0 "
                 "WHERE id=?", (None if found is None else metric.number(
                     found.metrics, searcher.metric), None if found is None else found.trial_id,
                                exp_id))


@command
def refresh_stale_bests(conn: sqlite3.Connection, after: int = 0,
                        budget: float = STALE_BUDGET) -> Done[tuple[int, int | None]]:
    """The best validations of experiments stored by older versions, as
    `refresh_stale_trials` does summaries: (how many, the id to go on after or None)."""
    return Done(_refresh_stale(conn, "experiments", "best_stale", refresh_best, after, budget))


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for key, value in new.items():
        if key in out and out[key] != value:
            raise InvalidArgument(
                f"overwriting existing metric keys is not supported, conflicting key: {key}"
            )
        out[key] = value
    return out


def _rollback_older_runs(
    conn: sqlite3.Connection, trial_id: int, run_id: int, group: str, steps: int
) -> None:
    """A report from a newer run archives what older runs reported past its step (at its step
    too, in its own group). Once run R archived past step S, a report of R at a later step
    archives a subset of that: only a new run, or a step at or below S, looks again. So the
    scan of the trial's reports happens about once per run, not once per report."""
    done = conn.execute("SELECT rolled_back_run, rolled_back_step FROM trials WHERE id=?",
                        (trial_id,)).fetchone()
    if done is not None and done[0] == run_id and steps > done[1]:
        return
    if run_id > 1:
        archived = conn.execute(
            "UPDATE metrics SET archived=1 WHERE trial_id=? AND run_id<? AND archived=0 AND "
            "((grp=? AND steps_completed>=?) OR (grp!=? AND steps_completed>?))",
            (trial_id, run_id, group, steps, group, steps),
        ).rowcount
        if archived:  # an archived report was in the summary, maybe the best validation
            refresh_trial(conn, trial_id)
            refresh_best(conn, conn.execute("SELECT experiment_id FROM trials WHERE id=?",
                                            (trial_id,)).fetchone()[0])
    if done is not None and done[0] == run_id:
        steps = min(steps, done[1])
    conn.execute("UPDATE trials SET rolled_back_run=?, rolled_back_step=? WHERE id=?",
                 (run_id, steps, trial_id))


def for_trial(
    conn: sqlite3.Connection, trial_id: int, group: str | None = None, *, after_steps: int = -1,
    limit: int = -1,
) -> list[Metric]:
    """The trial's live reports (of `group`) by steps, the first `limit` of them (-1: all)."""
    sql = f"{FROM_METRICS} WHERE trial_id=? AND archived=0 AND steps_completed>?"
    args: list[Any] = [trial_id, after_steps]
    if group:
        sql += " AND grp=?"
        args.append(group)
    sql += " ORDER BY steps_completed, id"
    if limit >= 0:  # PostgreSQL has no LIMIT -1
        sql += " LIMIT ?"
        args.append(limit)
    rows = conn.execute(sql, args)
    return [Metric.from_row(r) for r in rows]


def latest(conn: sqlite3.Connection, trial_id: int, group: str) -> Metric | None:
    row = conn.execute(
        f"{FROM_METRICS} WHERE trial_id=? AND grp=? AND archived=0 "
        "ORDER BY steps_completed DESC, id DESC LIMIT 1",
        (trial_id, group),
    ).fetchone()
    return Metric.from_row(row) if row else None


def validations_with(conn: sqlite3.Connection, trial_ids: list[int], name: str) -> list[Metric]:
    """Validation reports of these trials that carry metric `name` (the searcher metric). The
    filter is Python's: a stored report may hold NaN or Infinity, which SQLite's JSON functions
    refuse as malformed."""
    rows: list[sqlite3.Row] = []
    for chunk, marks in in_chunks(trial_ids):
        rows += conn.execute(
            f"{FROM_METRICS} WHERE trial_id IN ({marks}) AND grp='validation' AND archived=0 "
            "ORDER BY steps_completed, id", chunk).fetchall()
    if len(trial_ids) > IN_CHUNK:  # the chunks' rows in one order
        rows.sort(key=lambda r: (r["steps_completed"], r["id"]))
    found = (Metric.from_row(r) for r in rows)
    return [m for m in found if m.metrics.get(name) is not None]


def at_steps(conn: sqlite3.Connection, trial_id: int, group: str, steps: int) -> Metric | None:
    """The trial's report of `group` at exactly `steps` (the newest run's), if any."""
    row = conn.execute(
        "SELECT * FROM metrics WHERE trial_id=? AND grp=? AND steps_completed=? AND archived=0 "
        "ORDER BY run_id DESC, id DESC LIMIT 1", (trial_id, group, steps)).fetchone()
    return Metric.from_row(row) if row else None


def at_steps_many(conn: sqlite3.Connection, wanted: Sequence[tuple[int, int]],
                  groups: Sequence[str]) -> dict[tuple[int, str, int], Metric]:
    """The reports of `groups` at exactly these (trial id, steps), the newest run's each, by
    (trial id, group, steps): one query per 200 trials, not one per checkpoint."""
    pairs = set(wanted)
    trial_ids = sorted({t for t, _ in pairs})
    steps = sorted({s for _, s in pairs})
    found: dict[tuple[int, str, int], Metric] = {}
    newest: dict[tuple[int, str, int], tuple[int, int]] = {}
    if not pairs or not groups or len(steps) > 500:
        return found if not pairs or not groups else _at_steps_each(conn, pairs, groups)
    for i in range(0, len(trial_ids), 200):
        chunk = trial_ids[i:i + 200]
        rows = conn.execute(
            f"{FROM_METRICS} WHERE trial_id IN ({','.join('?' * len(chunk))}) "
            f"AND grp IN ({','.join('?' * len(groups))}) "
            f"AND steps_completed IN ({','.join('?' * len(steps))}) AND archived=0",
            (*chunk, *groups, *steps))
        for r in rows:
            key = (r["trial_id"], r["grp"], r["steps_completed"])
            if (key[0], key[2]) in pairs and (r["run_id"], r["id"]) > newest.get(key, (0, 0)):
                newest[key] = (r["run_id"], r["id"])  # the newest run's last report
                found[key] = Metric.from_row(r)
    return found


def _at_steps_each(conn: sqlite3.Connection, pairs: set[tuple[int, int]],
                   groups: Sequence[str]) -> dict[tuple[int, str, int], Metric]:
    """Many distinct steps: per trial, its reports of `groups`, filtered here."""
    found: dict[tuple[int, str, int], Metric] = {}
    for trial_id in sorted({t for t, _ in pairs}):
        for group in groups:
            for m in for_trial(conn, trial_id, group):
                if (trial_id, m.steps_completed) in pairs:
                    found[(trial_id, group, m.steps_completed)] = m
    return found


def reports(conn: sqlite3.Connection, trial_id: int) -> list[tuple[str, dict[str, Any]]]:
    """Every live report of the trial as (group, metrics), in the order they were made."""
    rows = conn.execute("SELECT grp, metrics FROM metrics WHERE trial_id=? AND archived=0 "
                        "ORDER BY id", (trial_id,))
    return [(r["grp"], jsonfast.loads(r["metrics"])) for r in rows]


def count(conn: sqlite3.Connection, trial_id: int, group: str | None,
          after_steps: int = -1) -> int:
    """How many live reports (of `group`, past `after_steps`) the trial has."""
    where, args = _live(trial_id, group, after_steps)
    return int(conn.execute(f"SELECT COUNT(*) FROM metrics WHERE {where}", args).fetchone()[0])


def chunk(conn: sqlite3.Connection, trial_id: int, group: str | None, *, after_steps: int = -1,
          desc: bool = False, offset: int = 0, key: tuple[int, int] | None = None,
          limit: int) -> tuple[list[Metric], tuple[int, int] | None]:
    """Up to `limit` of the trial's live reports in page order, from `offset` or, for the
    chunks after the first, past `key` (the last one's (steps, id)): a long read in pieces,
    each an index walk, none skipping what the one before read. Also the key to go on from."""
    way, past = ("DESC", "<") if desc else ("ASC", ">")
    if key is not None and not desc:
        after_steps = key[0] - 1  # (the index's range starts at the key, not at the first row)
    where, args = _live(trial_id, group, after_steps)
    if key is not None:
        where += f" AND steps_completed {past}= ? AND (steps_completed, id) {past} (?, ?)"
        args += [key[0], key[0], key[1]]
        offset = 0
    rows = conn.execute(
        f"{FROM_METRICS} WHERE {where} ORDER BY steps_completed {way}, id {way} "
        "LIMIT ? OFFSET ?", (*args, limit, offset)).fetchall()
    last = (int(rows[-1]["steps_completed"]), int(rows[-1]["id"])) if rows else None
    return [Metric.from_row(r) for r in rows], last


def _live(trial_id: int, group: str | None, after_steps: int) -> tuple[str, list[Any]]:
    where = "trial_id=? AND archived=0 AND steps_completed>?"
    args: list[Any] = [trial_id, after_steps]
    if group:
        where += " AND grp=?"
        args.append(group)
    return where, args


def raw_series(conn: sqlite3.Connection, trial_id: int, group: str,
               after_steps: int = -1) -> list[tuple[int, str]]:
    """(steps, metrics JSON text) of the trial's live reports of `group`, by steps: read here,
    parsed and downsampled off the store thread."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT steps_completed, metrics FROM metrics WHERE trial_id=? AND grp=? AND "
        "archived=0 AND steps_completed>? ORDER BY steps_completed, id",
        (trial_id, group, after_steps))]
