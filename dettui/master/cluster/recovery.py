"""What start-up re-derives after a crash, from the committed state (`recover`), and what an
older version did not keep, computed while the master serves (`backfill`)."""

from __future__ import annotations

import logging

from dettui.master import checkpoint_gc
from dettui.master.cluster.dispatcher import Dispatcher
from dettui.master.store import exits
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store

log = logging.getLogger("dettui.master.cluster")


async def recover(dispatcher: Dispatcher) -> None:
    """After a restart, re-derive from the committed state what a crash may have lost. What
    needs an agent's word is `Agents._reconcile`'s, when the agent registers again (kills and
    starts resent, allocations it lost ended); preemption long-polls answer from the store;
    here: preemptions asked before the crash keep their timeout; trials a searcher stopped get
    their preemption; allocations whose every part had exited end (older versions committed
    the two apart); searcher events an older version lost are replayed and experiments whose
    last trial ended are settled; experiments that ended with their checkpoint GC pending are
    collected; deletions a crash cut between their two commits are finished. (The best
    validations and summaries an older version did not keep are `backfill`'s, while the master
    serves.)"""
    db = dispatcher.db
    await dispatcher.run(exits.flag_stopped)
    for alloc in await db.run(trial_store.live_allocations):
        if alloc.preempt_requested:
            dispatcher.preempting.setdefault(alloc.id, dispatcher.clock.monotonic())
        if alloc.agents and all(a in alloc.part_exits for a in alloc.agents):
            log.info("allocation %s: every part had exited; ending it", alloc.id)
            await dispatcher.run(exits.end, alloc.id, *exits.first_failure(alloc))
    for exp in await db.run(exp_store.live):
        await dispatcher.run(exits.catch_up, exp.id)
    for exp_id in await db.run(exits.gc_pending):
        await dispatcher.apply(exits.ended_effects_of(exp_id))
    for exp_id in await db.run(exp_store.pending_deletions):
        exp = await db.run(exp_store.get, exp_id)
        removed = await checkpoint_gc.remove_all(db, exp)
        await dispatcher.run(exp_store.delete, exp_id)
        log.info("experiment %d: its deletion, cut by a restart, is done (%d checkpoint(s))",
                 exp_id, removed)


async def backfill(dispatcher: Dispatcher) -> None:
    """Compute what an older version did not keep (experiments' best validations, trials'
    summaries: minutes on a database of millions of reports) chunk by chunk while the master
    serves. Until a row is done, readers see it as the older version left it, and a new report
    to it computes it first (`metric_store`)."""
    clock = dispatcher.clock
    for what, step in (("best validations of experiments", metric_store.refresh_stale_bests),
                       ("summary metrics of trials", metric_store.refresh_stale_trials)):
        total, after, started = 0, 0, clock.monotonic()
        while after is not None:
            try:
                chunk = await dispatcher.run(step, after)
                assert chunk is not None
                done, after = chunk
            except Exception:  # noqa: BLE001 - what is left stays flagged: the next start
                log.exception("computing the %s an older version did not keep failed after "
                              "%d; the next start-up goes on with the rest", what, total)
                return
            total += done
            if after is not None and total % 10_000 < done:
                log.info("computing the %s an older version did not keep: %d so far", what,
                         total)
        if total:
            log.info("computed the %s an older version did not keep: %d in %.1f s", what,
                     total, clock.monotonic() - started)
