"""Checkpoints as Determined's API shows them (`v1Checkpoint`): with the training metadata the
SDK asserts (`training.experimentConfig`), the trial's hyperparameters and the training and
validation metrics reported at the checkpoint's step; and their order for the list routes
(`sortByAttr`, `sortByMetric`, `orderBy`, `states`). Run on the store thread."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Any

from dettui import metric
from dettui.errors import InvalidArgument, NotFound
from dettui.master import serialize
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Checkpoint, Experiment, Metric, Trial

SORT_ATTRS = ("SORT_BY_UNSPECIFIED", "SORT_BY_UUID", "SORT_BY_TRIAL_ID", "SORT_BY_BATCH_NUMBER",
              "SORT_BY_END_TIME", "SORT_BY_STATE", "SORT_BY_SEARCHER_METRIC")
ORDERS = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")
STATES = ("STATE_UNSPECIFIED", "STATE_ACTIVE", "STATE_COMPLETED", "STATE_ERROR",
          "STATE_DELETED", "STATE_PARTIALLY_DELETED")


class _Cache:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.exps: dict[int, Experiment | None] = {}
        self.trials: dict[int, Trial | None] = {}

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
        return metric_store.at_steps(self.conn, c.trial_id, group, c.steps_completed)


def view(conn: sqlite3.Connection, c: Checkpoint, cache: _Cache | None = None) -> dict[str, Any]:
    cache = cache or _Cache(conn)
    exp, trial = cache.exp(c.experiment_id), cache.trial(c.trial_id)
    return serialize.checkpoint(
        c, hparams=trial.hparams if trial is not None else None,
        config=exp.config if exp is not None else None,
        training=cache.metric(c, "training"), validation=cache.metric(c, "validation"),
        searcher_metric=exp.searcher_metric if exp is not None else None)


def views(conn: sqlite3.Connection, ckpts: Sequence[Checkpoint]) -> list[dict[str, Any]]:
    cache = _Cache(conn)
    return [view(conn, c, cache) for c in ckpts]


def ordered(conn: sqlite3.Connection, ckpts: Sequence[Checkpoint], searcher_metric: str,
            smaller_is_better: bool, *, sort_attr: str | None, sort_metric: str | None,
            order: str | None, states: Sequence[str]) -> list[dict[str, Any]]:
    """The views of `ckpts` filtered by state and sorted as Determined's master sorts them:
    by the searcher metric best first (smaller_is_better decides, unless `order` does), by a
    named validation metric, or by an attribute; checkpoints without the value (or with NaN,
    `dettui.metric`'s rule) last."""
    for value, allowed, what in ((sort_attr, SORT_ATTRS, "sortByAttr"),
                                 (order, ORDERS, "orderBy")):
        if value and value not in allowed:
            raise InvalidArgument(f"{what}: unknown value {value[:40]!r}")
    bad = [s for s in states if s not in STATES]
    if bad:
        raise InvalidArgument(f"states: unknown value {bad[0][:40]!r}")
    out = views(conn, [c for c in ckpts if not states or c.state.value in states])
    name = sort_metric or (searcher_metric if sort_attr == "SORT_BY_SEARCHER_METRIC" else None)
    if name is not None:
        desc = (order == "ORDER_BY_DESC" if order not in (None, "ORDER_BY_UNSPECIFIED")
                else sort_metric is None and not smaller_is_better)
        return _by_value(out, lambda v: _val(v, name), desc)
    key = {"SORT_BY_UUID": lambda v: v["uuid"], "SORT_BY_TRIAL_ID": lambda v: v["training"][
        "trialId"], "SORT_BY_BATCH_NUMBER": lambda v: v["metadata"].get("steps_completed"),
        "SORT_BY_STATE": lambda v: v["state"]}.get(sort_attr or "", lambda v: v["reportTime"])
    return _by_value(out, key, order == "ORDER_BY_DESC")


def _val(v: dict[str, Any], name: str) -> float | None:
    value = metric.number((v["training"].get("validationMetrics") or {}).get("avgMetrics"), name)
    return None if value is None or math.isnan(value) else value


def _by_value(rows: list[dict[str, Any]], key: Any, desc: bool) -> list[dict[str, Any]]:
    have = [r for r in rows if key(r) is not None]
    missing = [r for r in rows if key(r) is None]
    return sorted(have, key=key, reverse=desc) + missing
