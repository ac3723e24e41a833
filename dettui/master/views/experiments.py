"""Experiments as GET /api/v1/experiments and GET /api/v1/experiments/{id} show them: the
list's objects (the push stream's `experiments` topics) and what the single view adds."""

from __future__ import annotations

import sqlite3
from typing import Any

from dettui.master.http import shapes
from dettui.master.store import Database
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Experiment


async def experiment_objects(db: Database,
                             ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Every experiment (or those of `ids`), archived ones too, as GET /api/v1/experiments
    shows them with `omitConfig=true` (the stream's objects: a dashboard shows no config, and
    500 of them with it were 1.5 MiB a snapshot)."""
    return [shapes.listed_experiment(e) for e in await db.read(exp_store.listed, ids)]


def extras(conn: sqlite3.Connection, exp: Experiment) -> dict[str, Any]:
    """What Determined's GetExperiment adds to an experiment, read for one experiment only (a
    list would pay it per row): its trials and how long it has run. (Its best trial and its
    checkpoints' count and bytes are kept on the experiment itself.)"""
    trial_ids = trial_store.ids_of_experiment(conn, exp.id)
    return {"trialIds": trial_ids,
            "duration": shapes.duration(exp.start_time, exp.end_time)}
