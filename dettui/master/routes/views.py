"""Composite read models assembled on the store thread (a trial with its metrics, ...)."""

from __future__ import annotations

import sqlite3
from typing import Any

from dettui import metric
from dettui.master import serialize, summary
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Experiment, Metric, Trial


def best_of(vals: list[Metric], name: str, smaller_is_better: bool) -> Metric | None:
    """The best validation (the earliest of equals), by `dettui.metric`'s rules."""
    return metric.best(sorted(vals, key=lambda m: m.steps_completed),
                       lambda m: metric.number(m.metrics, name), smaller_is_better)


def trial_views(conn: sqlite3.Connection, exp: Experiment, trials: list[Trial]) -> list[Any]:
    name = exp.searcher_metric
    vals = metric_store.validations_with(conn, [t.id for t in trials], name) if name else []
    out = []
    for t in trials:
        mine = [m for m in vals if m.trial_id == t.id]
        best = best_of(mine, name, exp.smaller_is_better)
        best_ckpt = None
        ckpts = ckpt_store.for_trial(conn, t.id)
        if best is not None:
            best_ckpt = next((c for c in ckpts if c.steps_completed == best.steps_completed),
                             None)
        out.append(serialize.trial(
            t, latest_validation=mine[-1] if mine else None, best_validation=best,
            latest_training=metric_store.latest(conn, t.id, "training"),
            best_checkpoint=best_ckpt, searcher_metric=name,
            allocation_ids=[a.id for a in trial_store.allocations_for_trial(conn, t.id)],
            summary_metrics=summary.summarize(metric_store.reports(conn, t.id)),
            checkpoints=ckpts,
        ))
    return out


def extras(conn: sqlite3.Connection, exp: Experiment) -> dict[str, Any]:
    """What Determined's GetExperiment adds to an experiment, read for one experiment only (a
    list would pay it per row): its trials, the checkpoints still holding files and their
    bytes, and how long it has run. (Its best trial is kept on the experiment itself.)"""
    trial_ids = [t.id for t in trial_store.for_experiment(conn, exp.id)]
    kept = [c for c in ckpt_store.for_experiment(conn, exp.id)
            if c.state.value in serialize.KEPT_STATES]
    return {
        "trialIds": trial_ids, "checkpointCount": len(kept),
        "checkpointSize": str(sum(serialize.resources_size(c.resources) for c in kept)),
        "duration": serialize.duration(exp.start_time, exp.end_time)}
