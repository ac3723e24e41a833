"""Applying a GC policy: find what it deletes (pure `gc.to_delete`), remove the files from
storage in a thread, and mark the records deleted (`checkpoints.set_resources_many`, a store
command: `collect` returns its effects to the dispatcher, which runs it; the routes that delete
or thin out checkpoints run it themselves once the files here are gone)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from dettui import metric
from dettui.errors import InvalidArgument
from dettui.master import checkpoint_files
from dettui.master.checkpoint_policy import CkptFacts, GcPolicy, to_delete
from dettui.master.store import Database
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Checkpoint, Experiment
from dettui.models import CheckpointState
from dettui.paths import checkpoint_uuid

log = logging.getLogger("dettui.master.checkpoint_policy")


def policy_of(exp: Experiment) -> GcPolicy:
    """The experiment's own GC policy (its config's checkpoint storage, whose defaults are the
    schema's)."""
    cs = exp.conf.checkpoint_storage
    if cs is None:  # never for a stored config (the master's default storage is filled in)
        return GcPolicy(0, 0, 0)
    return GcPolicy(cs.save_experiment_best, cs.save_trial_best, cs.save_trial_latest)


def plan(conn: sqlite3.Connection, exp: Experiment, policy: GcPolicy) -> list[Checkpoint]:
    """The checkpoints of `exp` that `policy` deletes."""
    name = exp.searcher_metric
    ckpts = [c for c in ckpt_store.for_experiment(conn, exp.id)
             if c.state is CheckpointState.COMPLETED and c.trial_id is not None]
    trial_ids = [t.id for t in trial_store.for_experiment(conn, exp.id)]
    values = {(m.trial_id, m.steps_completed): metric.number(m.metrics, name)
              for m in metric_store.validations_with(conn, trial_ids, name)}
    facts = []
    for c in ckpts:
        v = values.get((c.trial_id, c.steps_completed or 0))
        value = None if v is None else metric.score(v, exp.smaller_is_better)
        facts.append(CkptFacts(c.uuid, int(c.trial_id or 0), c.steps_completed or 0, value,
                               c.steps_completed))
    doomed = set(to_delete(facts, policy))
    return [c for c in ckpts if c.uuid in doomed]


async def collect(db: Database, run: Callable[..., Awaitable[Any]], exp_id: int) -> int:
    """For the dispatcher (`run` is its `Dispatcher.run`): delete what the experiment's GC policy
    (as stored now) says, each checkpoint's files and then its record (one command each, its
    effects performed at once: an interrupted collection leaves no record of files that are
    gone, and loses no notification of those it marked). How many it deleted."""
    exp = await db.run(exp_store.get, exp_id)
    doomed = await db.run(plan, exp, policy_of(exp))
    for ckpt in doomed:
        await _remove(exp, ckpt)
        await run(ckpt_store.set_resources_many, [(ckpt.uuid, {})])
    if doomed:
        log.info("GC of experiment %d deleted %d checkpoint(s)", exp_id, len(doomed))
    return len(doomed)


async def remove_all(db: Database, exp: Experiment) -> int:
    """Take every checkpoint of the experiment out of storage (before it is deleted); return
    how many there were."""
    ckpts = await db.run(ckpt_store.for_experiment, exp.id)
    for ckpt in ckpts:
        await _remove(exp, ckpt)
    return len(ckpts)


async def delete(exp: Experiment, ckpts: list[Checkpoint]) -> list[tuple[str, dict[str, str]]]:
    """`det checkpoint delete`: these checkpoints' files out of storage; what is left of each
    (nothing), for `checkpoints.set_resources_many` to mark the records DELETED."""
    for ckpt in ckpts:
        await _remove(exp, ckpt)
    return [(c.uuid, {}) for c in ckpts]


async def remove_files(exp: Experiment, ckpts: list[Checkpoint],
                       globs: list[str]) -> list[tuple[str, dict[str, str]]]:
    """`det checkpoint rm`: what `globs` match goes out of these checkpoints' directories (no
    globs: their resources are only listed again); what is left of each, for
    `checkpoints.set_resources_many` to record."""
    left = []
    for ckpt in ckpts:
        where = checkpoint_files.located(exp.config, checkpoint_uuid(ckpt.uuid))
        left.append((ckpt.uuid, await asyncio.to_thread(checkpoint_files.remove_matching,
                                                        where, globs)))
    return left


async def _remove(exp: Experiment, ckpt: Checkpoint) -> None:
    """One checkpoint's files out of the experiment's storage (gone already is fine). Only the
    entry named by a valid uuid directly under the storage base is removed: a record with any
    other uuid (written before uuids were checked) is left alone and reported."""
    try:
        name = checkpoint_uuid(ckpt.uuid)
    except InvalidArgument:
        log.error("not removing checkpoint %r of experiment %d: its uuid is not a UUID",
                  ckpt.uuid, exp.id)
        return
    await asyncio.to_thread(checkpoint_files.remove, checkpoint_files.located(exp.config, name))
