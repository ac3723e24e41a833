"""Composite read models assembled on the store thread (a trial with its metrics, ...)."""

from __future__ import annotations

import math
import sqlite3
from typing import Any

from dettui.master import serialize
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Experiment, Metric, Trial


def best_of(vals: list[Metric], metric: str, smaller_is_better: bool) -> Metric | None:
    scored = [m for m in vals if isinstance(m.metrics.get(metric), int | float)
              and not math.isnan(m.metrics[metric])]
    if not scored:
        return None
    sign = 1 if smaller_is_better else -1
    return min(scored, key=lambda m: (sign * m.metrics[metric], m.steps_completed))


def trial_views(conn: sqlite3.Connection, exp: Experiment, trials: list[Trial]) -> list[Any]:
    searcher = exp.config.get("searcher") or {}
    metric = searcher.get("metric") or ""
    smaller = bool(searcher.get("smaller_is_better", True))
    vals = metric_store.validations_with(conn, [t.id for t in trials], metric) if metric else []
    out = []
    for t in trials:
        mine = [m for m in vals if m.trial_id == t.id]
        best = best_of(mine, metric, smaller)
        best_ckpt = None
        ckpts = ckpt_store.for_trial(conn, t.id)
        if best is not None:
            best_ckpt = next((c for c in ckpts if c.steps_completed == best.steps_completed),
                             None)
        out.append(serialize.trial(
            t, latest_validation=mine[-1] if mine else None, best_validation=best,
            latest_training=metric_store.latest(conn, t.id, "training"),
            best_checkpoint=best_ckpt, searcher_metric=metric,
            allocation_ids=[a.id for a in trial_store.allocations_for_trial(conn, t.id)],
        ))
    return out
