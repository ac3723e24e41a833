"""Trials as Determined's views show them (a trial with its metrics, best validation and
checkpoints), assembled on the store thread: read by the trial and experiment routes and the
push stream's `experiment:<id>` topics."""

from __future__ import annotations

import sqlite3
from typing import Any

from dettui.master.http import shapes
from dettui.master.store import Database
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
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
        out.append(shapes.trial(
            t, latest_validation=latest_validation, best_validation=best,
            latest_training=metric_store.latest(conn, t.id, "training"),
            best_checkpoint=best_ckpt, searcher_metric=name,
            allocation_ids=[a.id for a in trial_store.allocations_for_trial(conn, t.id)],
            summary_metrics=summary_metrics, checkpoints=ckpts,
        ))
    return out


async def trial_objects(db: Database, exp_id: int,
                        ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Every trial of an experiment (or those of `ids`) as GET /api/v1/experiments/{id}/trials
    shows them."""
    exp = await db.read(exp_store.get, exp_id)
    if ids is None:
        rows = await db.read(trial_store.for_experiment, exp_id)
    else:
        rows = await db.read(trial_store.of_experiment, exp_id, ids)
    return list(await db.read(trial_views, exp, rows))
