"""Composite read models assembled on the store thread (a trial with its metrics, ...)."""

from __future__ import annotations

import sqlite3
from typing import Any

from dettui.master import serialize
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Experiment, Trial


def trial_views(conn: sqlite3.Connection, exp: Experiment, trials: list[Trial]) -> list[Any]:
    """Trials as Determined's views. Their summaries and best validations are kept on the
    trial rows by the reports, so a view costs a few indexed reads, however long the run."""
    name = exp.searcher_metric
    kept = metric_store.trial_summaries(conn, [t.id for t in trials])
    out = []
    for t in trials:
        summary_metrics, best_steps = kept.get(t.id, (None, None))
        best = (metric_store.at_steps(conn, t.id, "validation", best_steps)
                if name and best_steps is not None else None)
        latest_validation = metric_store.latest(conn, t.id, "validation")
        ckpts = ckpt_store.for_trial(conn, t.id)
        best_ckpt = None
        if best is not None:
            best_ckpt = next((c for c in ckpts if c.steps_completed == best.steps_completed),
                             None)
        out.append(serialize.trial(
            t, latest_validation=latest_validation, best_validation=best,
            latest_training=metric_store.latest(conn, t.id, "training"),
            best_checkpoint=best_ckpt, searcher_metric=name,
            allocation_ids=[a.id for a in trial_store.allocations_for_trial(conn, t.id)],
            summary_metrics=summary_metrics, checkpoints=ckpts,
        ))
    return out


def extras(conn: sqlite3.Connection, exp: Experiment) -> dict[str, Any]:
    """What Determined's GetExperiment adds to an experiment, read for one experiment only (a
    list would pay it per row): its trials and how long it has run. (Its best trial and its
    checkpoints' count and bytes are kept on the experiment itself.)"""
    trial_ids = [t.id for t in trial_store.for_experiment(conn, exp.id)]
    return {"trialIds": trial_ids,
            "duration": serialize.duration(exp.start_time, exp.end_time)}
