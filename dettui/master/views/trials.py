"""Trials as Determined's views show them (a trial with its metrics, best validation and
checkpoints), assembled on the store thread: read by the trial and experiment routes and the
push stream's `experiment:<id>` topics. One field is dettui's own: `stoppedBySearcher`, true
for a trial its searcher stopped before the search's full length (ASHA did not promote it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from dettui import metric
from dettui.config.schema import Length, Searcher
from dettui.master.http import shapes
from dettui.master.store import Database
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Checkpoint, Experiment, Metric, Trial
from dettui.models import CheckpointState, TrialState


def trial_views(conn: sqlite3.Connection, exp: Experiment, trials: list[Trial],
                resources: Mapping[int, dict[str, Any]] | None = None) -> list[Any]:
    """Trials as Determined's views. Their summaries and best validations are kept on the
    trial rows by the reports, so a view costs a few indexed reads, however long the run.
    `resources`: what running trials use (`TrialUsage.views`), shown as `resources`."""
    name = exp.searcher_metric
    kept = metric_store.trial_summaries(conn, [t.id for t in trials])
    out = []
    for t in trials:
        summary_metrics, best_steps = kept.get(t.id, (None, None))
        best = (metric_store.at_steps(conn, t.id, "validation", best_steps)
                if name and best_steps is not None else None)
        latest_validation = metric_store.latest(conn, t.id, "validation")
        ckpts = ckpt_store.for_trial(conn, t.id)
        best_ckpt = _best_checkpoint(conn, exp, t.id, ckpts) if name else None
        out.append({**shapes.trial(
            t, latest_validation=latest_validation, best_validation=best,
            latest_training=metric_store.latest(conn, t.id, "training"),
            best_checkpoint=best_ckpt, searcher_metric=name,
            allocation_ids=[a.id for a in trial_store.allocations_for_trial(conn, t.id)],
            summary_metrics=summary_metrics, checkpoints=ckpts,
        ), "stoppedBySearcher": stopped_early(exp, t, latest_validation)})
        used = resources.get(t.id) if resources is not None else None
        if used is not None and t.state is TrialState.RUNNING:
            out[-1]["resources"] = used
    return out


def stopped_early(exp: Experiment, t: Trial, latest_validation: Metric | None) -> bool:
    """Whether the searcher stopped the trial short of the search's full length (ASHA's
    "not promoted to the next rung"). Not a trial that reached the full length (the searcher
    also closes those), nor one whose own code gave up (`early_exit`: invalid hparams)."""
    if not t.searcher_stopped or t.early_exit is not None:
        return False
    searcher = exp.conf.searcher
    budget = searcher.time_budget()
    if budget is None:
        return True
    unit = _time_unit(searcher)
    reached = metric.number(latest_validation.metrics, unit) \
        if latest_validation is not None else None
    if reached is None and unit == "batches":
        reached = float(t.total_batches)
    return reached is None or reached < budget


def _time_unit(searcher: Searcher) -> str:
    """The metric the searcher's length is counted in (`time_metric`, or `max_length`'s)."""
    if searcher.time_metric and searcher.max_time:
        return searcher.time_metric
    if isinstance(searcher.max_length, Length):
        return next(iter(searcher.max_length.as_dict()))
    return "batches"


def _best_checkpoint(conn: sqlite3.Connection, exp: Experiment, trial_id: int,
                     ckpts: list[Checkpoint]) -> Checkpoint | None:
    """Determined's `bestCheckpoint`: of the trial's COMPLETED checkpoints with a validation
    at their step that has the searcher metric, the one whose metric is best (not only one at
    the best validation's step: a trial that validated more often than it checkpointed has a
    best checkpoint too). None when no checkpoint has such a validation."""
    done = [c for c in ckpts if c.state is CheckpointState.COMPLETED
            and c.steps_completed is not None]
    if not done:
        return None
    name, smaller = exp.searcher_metric, exp.conf.searcher.smaller_is_better
    found = metric_store.at_steps_many(conn, [(trial_id, c.steps_completed or 0) for c in done],
                                       ["validation"])
    ranked = []
    for i, c in enumerate(done):
        m = found.get((trial_id, "validation", c.steps_completed or 0))
        value = metric.number(m.metrics, name) if m is not None and name else None
        if value is not None:
            ranked.append((metric.score(value, smaller), i, c))
    return min(ranked, key=lambda r: (r[0], r[1]))[2] if ranked else None


async def trial_objects(db: Database, exp_id: int, ids: list[int] | None = None,
                        resources: Mapping[int, dict[str, Any]] | None = None,
                        ) -> list[dict[str, Any]]:
    """Every trial of an experiment (or those of `ids`) as GET /api/v1/experiments/{id}/trials
    shows them."""
    exp = await db.read(exp_store.get, exp_id)
    if ids is None:
        rows = await db.read(trial_store.for_experiment, exp_id)
    else:
        rows = await db.read(trial_store.of_experiment, exp_id, ids)
    return list(await db.read(trial_views, exp, rows, resources))
