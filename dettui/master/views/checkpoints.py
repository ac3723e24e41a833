"""Checkpoints as Determined's API shows them (`v1Checkpoint`): with the training metadata the
SDK asserts (`training.experimentConfig`), the trial's hyperparameters and the training and
validation metrics reported at the checkpoint's step; and their order for the list routes
(`sortByAttr`, `sortByMetric`, `orderBy`, `states`). Run on the store thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from multidict import MultiMapping

from dettui import metric
from dettui.errors import InvalidArgument, NotFound
from dettui.master.http import shapes
from dettui.master.store import Database
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.page import Page, Window
from dettui.master.store.records import Checkpoint, Experiment, Metric, Trial

SORT_ATTRS = ("SORT_BY_UNSPECIFIED", "SORT_BY_UUID", "SORT_BY_TRIAL_ID", "SORT_BY_BATCH_NUMBER",
              "SORT_BY_END_TIME", "SORT_BY_STATE", "SORT_BY_SEARCHER_METRIC")
STATES = ("STATE_UNSPECIFIED", "STATE_ACTIVE", "STATE_COMPLETED", "STATE_ERROR",
          "STATE_DELETED", "STATE_PARTIALLY_DELETED")


class _Cache:
    """The experiments, trials and metrics a list's views share, each read once: the metrics
    at every checkpoint's step in one query for the whole page."""

    def __init__(self, conn: sqlite3.Connection, ckpts: Sequence[Checkpoint] = ()) -> None:
        self.conn = conn
        self.exps: dict[int, Experiment | None] = {}
        self.trials: dict[int, Trial | None] = {}
        self.metrics = metric_store.at_steps_many(conn, _steps_of(ckpts), GROUPS)

    def exp(self, exp_id: int | None) -> Experiment | None:
        if exp_id is None:
            return None
        if exp_id not in self.exps:
            try:
                self.exps[exp_id] = exp_store.get(self.conn, exp_id)
            except NotFound:
                self.exps[exp_id] = None
        return self.exps[exp_id]

    def trial(self, trial_id: int | None) -> Trial | None:
        if trial_id is None:
            return None
        if trial_id not in self.trials:
            try:
                self.trials[trial_id] = trial_store.get(self.conn, trial_id)
            except NotFound:
                self.trials[trial_id] = None
        return self.trials[trial_id]

    def metric(self, c: Checkpoint, group: str) -> Metric | None:
        if c.trial_id is None or c.steps_completed is None:
            return None
        return self.metrics.get((c.trial_id, group, c.steps_completed))


GROUPS = ("training", "validation")


def _steps_of(ckpts: Sequence[Checkpoint]) -> list[tuple[int, int]]:
    return [(c.trial_id, c.steps_completed) for c in ckpts
            if c.trial_id is not None and c.steps_completed is not None]


def view(conn: sqlite3.Connection, c: Checkpoint, cache: _Cache | None = None) -> dict[str, Any]:
    cache = cache or _Cache(conn, [c])
    exp, trial = cache.exp(c.experiment_id), cache.trial(c.trial_id)
    return shapes.checkpoint(
        c, hparams=trial.hparams if trial is not None else None,
        config=exp.config if exp is not None else None,
        training=cache.metric(c, "training"), validation=cache.metric(c, "validation"),
        searcher_metric=exp.searcher_metric if exp is not None else None)


def views(conn: sqlite3.Connection, ckpts: Sequence[Checkpoint]) -> list[dict[str, Any]]:
    cache = _Cache(conn, ckpts)
    return [view(conn, c, cache) for c in ckpts]


def page(conn: sqlite3.Connection, want: Page, searcher_metric: str, smaller_is_better: bool,
         *, experiment_id: int | None = None, trial_id: int | None = None,
         sort_attr: str | None, sort_metric: str | None, states: Sequence[str],
         order: str | None) -> tuple[list[dict[str, Any]], Window]:
    """A page of an experiment's (or a trial's) checkpoint views, filtered by state and sorted
    as Determined's master sorts them: by the searcher metric best first (smaller_is_better
    decides, unless `order` does), by a named validation metric, or by an attribute (in SQL,
    with LIMIT/OFFSET); checkpoints without the value (or with NaN, `dettui.metric`'s rule)
    last. Only the page's checkpoints are turned into views."""
    if sort_attr and sort_attr not in SORT_ATTRS:
        raise InvalidArgument(f"sortByAttr: unknown value {sort_attr[:40]!r}")
    bad = [s for s in states if s not in STATES]
    if bad:
        raise InvalidArgument(f"states: unknown value {bad[0][:40]!r}")
    where = {"experiment_id": experiment_id, "trial_id": trial_id}
    name = sort_metric or (searcher_metric if sort_attr == "SORT_BY_SEARCHER_METRIC" else None)
    if name is None:
        rows, window = ckpt_store.page(conn, want, **where, states=states,
                                       sort_attr=sort_attr or "SORT_BY_UNSPECIFIED")
        return views(conn, rows), window
    desc = (order == "ORDER_BY_DESC" if order not in (None, "", "ORDER_BY_UNSPECIFIED")
            else sort_metric is None and not smaller_is_better)
    every = ckpt_store.matching(conn, **where, states=states)
    vals = metric_store.at_steps_many(conn, _steps_of(every), ("validation",))

    def value(c: Checkpoint) -> float | None:
        m = vals.get((c.trial_id or 0, "validation", c.steps_completed or 0))
        return metric.candidate(m.metrics, name) if m is not None else None

    have = [c for c in every if value(c) is not None]
    ranked = sorted(have, key=value, reverse=desc) + [c for c in every if value(c) is None]
    window = want.window(len(ranked))
    return views(conn, window.of(ranked)), window


# The list routes' query (GET /api/v1/trials/{id}/checkpoints, .../experiments/{id}/checkpoints)
LIST_QUERY = {"sortByAttr": str, "sortByMetric": str, "orderBy": str, "states": list[str]}


async def listed(db: Database, want: Page, query: MultiMapping[str], exp: Experiment,
                 trial_id: int | None = None) -> dict[str, Any]:
    """A list route's page of checkpoint views (of the experiment, or of one of its trials),
    filtered and sorted as Determined's (`LIST_QUERY`)."""
    where = {"trial_id": trial_id} if trial_id is not None else {"experiment_id": exp.id}
    out, window = await db.read(
        page, want, exp.searcher_metric,
        exp.smaller_is_better, **where, sort_attr=query.get("sortByAttr") or None,
        sort_metric=query.get("sortByMetric") or None, states=query.getall("states", []),
        order=query.get("orderBy"))
    return {"checkpoints": out, "pagination": window.pagination()}
