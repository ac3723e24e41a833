"""Allocations after they start: exits (one store command each), kills, losses, preemption and
the searcher's reactions, and what start-up re-derives after a crash."""

from __future__ import annotations

import logging
import time
from typing import Any

from dettui.master import lifecycle
from dettui.master.cluster.hub import Hub
from dettui.master.cluster.links import kill_message
from dettui.master.store import exits
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import search as search_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation, Experiment
from dettui.models import AllocationState, ExperimentState

log = logging.getLogger("dettui.master.cluster")


class Allocations:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.db = hub.db

    # --- exits ----------------------------------------------------------------------------

    async def part_exit(self, agent_id: str, alloc_id: str, exit_code: int | None,
                        reason: str) -> None:
        """One agent's part of an allocation ended. A failure ends the parts on every other
        agent at once (torchrun alone would leave them hanging); the allocation ends when all
        parts have, with the first failure's code (`exits.part_exit`, one commit)."""
        done = await self.db.run(exits.part_exit, alloc_id, agent_id, exit_code, reason,
                                 self.hub.links.ids())
        if done.daemons:
            self._end_parts(done, "every worker part has exited: ending its daemons")
        else:
            self._end_parts(done, f"node {agent_id} failed")
        await self._after_exit(done)

    async def mark_daemon(self, alloc_id: str, agent_id: str) -> bool:
        """`agent_id`'s part of the allocation is a daemon (`exits.mark_daemon`); False if the
        allocation has one part (the request is ignored, as Determined does)."""
        done = await self.db.run(exits.mark_daemon, alloc_id, agent_id)
        if done is None:
            return False
        self._end_parts(done, "every worker part has exited: ending its daemons")
        return True

    def _end_parts(self, done: exits.Exit, why: str) -> None:
        """Tell the agents of `done.end_parts` to end their parts of the allocation."""
        if done.end_parts:
            log.info("allocation %s: %s; ending it on %s", done.alloc.id, why,
                     ", ".join(done.end_parts))
        for other in done.end_parts:
            link = self.hub.links.get(other)
            if link is not None:
                link.send(kill_message(done.alloc.id, why))

    async def finish(self, alloc_id: str, exit_code: int | None, reason: str,
                     message: str = "") -> None:
        """End the whole allocation now (lost, or killed with no agent left). Idempotent."""
        await self._after_exit(await self.db.run(exits.end, alloc_id, exit_code, reason),
                               message)

    async def _after_exit(self, done: exits.Exit, message: str = "") -> None:
        """What follows an allocation's end, once committed: followers told, long-polls of
        trials the searcher stopped woken, checkpoints of an ended experiment collected."""
        if done.trial is None:
            return
        alloc, trial = done.alloc, done.trial
        self.hub.preempting.pop(alloc.id, None)
        self.hub.backfilled.pop(alloc.id, None)
        log.info("allocation %s exited (code %s %s) -> trial %s %s", alloc.id, alloc.exit_code,
                 alloc.exit_reason or message, trial.id, trial.state.short)
        self.hub.notify(f"allocation:{alloc.id}")
        self.hub.experiment_changed(trial.experiment_id, trial.id, jobs=True)
        self.searcher_effects(trial.experiment_id, done.searcher)
        await self.ended(done.ended)
        self.hub.kick()

    async def kill(self, alloc_id: str, why: str) -> None:
        """Commit the kill request, then deliver it; nothing if the allocation has exited."""
        alloc = await self.db.run(trial_store.request_kill, alloc_id)
        if alloc is not None:
            await self.deliver_kill(alloc, why)

    async def deliver_kill(self, alloc: Allocation, why: str) -> None:
        """Tell every agent still running a part of `alloc` (kill committed) to end it; with
        none left to tell, the allocation has ended."""
        if not self.hub.links.kill(alloc, why):
            await self.finish(alloc.id, None, lifecycle.KILLED, "agent gone")

    async def lose(self, alloc: Allocation, why: str) -> None:
        """A part of the allocation is gone with its agent: end the rest, requeue the trial."""
        self.hub.links.kill(alloc, why)
        await self.finish(alloc.id, None, lifecycle.LOST, why)

    async def lose_agent(self, agent_id: str, why: str) -> None:
        """Every allocation with a part on `agent_id` is lost."""
        for alloc in await self.db.run(trial_store.live_allocations):
            if agent_id in alloc.agents and agent_id not in alloc.part_exits:
                await self.lose(alloc, why)

    # --- preemption -----------------------------------------------------------------------

    async def preempt(self, alloc_id: str) -> None:
        """Commit the preemption request, then time it and wake its long-poll; nothing if the
        allocation has exited."""
        if await self.db.run(trial_store.request_preempt, alloc_id):
            self.hub.preempted(alloc_id)

    async def wait_preemption(self, alloc_id: str, timeout: float) -> bool:
        """Determined's preemption long-poll: True at once if preempted, else wait."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            alloc = await self.db.run(trial_store.allocation, alloc_id)
            if alloc.preempt_requested:
                return True
            if alloc.state is AllocationState.EXITED:
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self.hub.notifier.wait(f"preempt:{alloc_id}", remaining)

    async def ack_preemption(self, alloc_id: str) -> None:
        await self.db.run(trial_store.ack_preempt, alloc_id)

    async def enforce_preemption_timeouts(self, now: float) -> None:
        """Allocations told to preempt that did not exit in time are killed."""
        for alloc_id, since in list(self.hub.preempting.items()):
            if now - since > self.hub.settings.preemption_timeout:
                del self.hub.preempting[alloc_id]
                await self.kill(alloc_id, "preemption timeout: it did not exit")

    # --- searchers and experiments' ends ------------------------------------------------

    async def validation_reported(self, trial_id: int, steps: int,
                                  metrics: dict[str, Any]) -> str | None:
        """Feed a validation to the searcher; the searcher's complaint, if any."""
        outcome, ended = await self.db.run(exits.validation, trial_id, steps, metrics)
        trial = await self.db.run(trial_store.get, trial_id)
        # Its best value may have moved: followers of the experiments list re-read this one.
        self.hub.notifier.notify("experiments", ids=[trial.experiment_id])
        self.searcher_effects(trial.experiment_id, outcome)
        await self.ended(ended)
        return outcome.error

    def searcher_effects(self, exp_id: int, outcome: search_store.Outcome) -> None:
        """After the commit of a searcher event: wake the preemption long-polls of the trials it
        stopped, tell followers, and schedule the trials it created."""
        if not outcome.created and not outcome.stopped:
            return
        for alloc_id in outcome.preempt:
            log.info("searcher of experiment %d stops allocation %s", exp_id, alloc_id)
            self.hub.preempted(alloc_id)
        for trial_id in outcome.stopped:
            self.hub.notify(f"trial:{trial_id}")
        if outcome.created:
            log.info("searcher of experiment %d created %d trial(s)", exp_id,
                     len(outcome.created))
        self.hub.experiment_changed(exp_id, jobs=True)
        self.hub.kick()

    async def ended(self, exp: Experiment | None) -> None:
        """An experiment ended (committed, with `gc_pending`): tell followers, collect."""
        if exp is None:
            return
        self.hub.experiment_changed(exp.id, jobs=True)
        await self.hub.collect(exp.id)

    async def settle_unmanaged(self, changes: list[tuple[int, ExperimentState]]) -> None:
        """Detached experiments whose state changed: tell followers; GC the ones that ended."""
        for exp_id, state in changes:
            self.hub.experiment_changed(exp_id)
            if state.is_terminal():
                await self.hub.collect(exp_id)

    # --- start-up -------------------------------------------------------------------------

    async def backfill(self) -> None:
        """Compute what an older version did not keep (experiments' best validations, trials'
        summaries: minutes on a database of millions of reports) chunk by chunk while the
        master serves. Until a row is done, readers see it as the older version left it, and a
        new report to it computes it first (`metric_store`)."""
        for what, step in (("best validations of experiments", metric_store.refresh_stale_bests),
                           ("summary metrics of trials", metric_store.refresh_stale_trials)):
            total, after, started = 0, 0, time.monotonic()
            while after is not None:
                try:
                    done, after = await self.db.run(step, after)
                except Exception:  # noqa: BLE001 - what is left stays flagged: the next start
                    log.exception("computing the %s an older version did not keep failed "
                                  "after %d; the next start-up goes on with the rest", what,
                                  total)
                    return
                total += done
                if after is not None and total % 10_000 < done:
                    log.info("computing the %s an older version did not keep: %d so far",
                             what, total)
            if total:
                log.info("computed the %s an older version did not keep: %d in %.1f s", what,
                         total, time.monotonic() - started)

    async def recover(self) -> None:
        """After a restart, re-derive from the committed state what a crash may have lost.
        What needs an agent's word is `Agents._reconcile`'s, when the agent registers again
        (kills and starts resent, allocations it lost ended); preemption long-polls answer
        from the store; here: preemptions asked before the crash keep their timeout;
        trials a searcher stopped get their preemption; allocations whose every part had
        exited end (older versions committed the two apart); searcher events an older version
        lost are replayed and experiments whose last trial ended are settled; experiments that
        ended with their checkpoint GC pending are collected. (The best validations and
        summaries an older version did not keep are `backfill`'s, while the master serves.)"""
        for alloc_id in await self.db.run(exits.flag_stopped):
            log.info("allocation %s: its trial was stopped by the searcher; preempting it",
                     alloc_id)
        for alloc in await self.db.run(trial_store.live_allocations):
            if alloc.preempt_requested:
                self.hub.preempting.setdefault(alloc.id, time.monotonic())
            if alloc.agents and all(a in alloc.part_exits for a in alloc.agents):
                log.info("allocation %s: every part had exited; ending it", alloc.id)
                await self.finish(alloc.id, *exits.first_failure(alloc))
        for exp in await self.db.run(exp_store.live):
            outcome, ended = await self.db.run(exits.catch_up, exp.id)
            self.searcher_effects(exp.id, outcome)
            await self.ended(ended)
        for exp_id in await self.db.run(exits.gc_pending):
            await self.hub.collect(exp_id)
