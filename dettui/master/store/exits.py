"""Allocation exits as store commands: a part's exit, the allocation's end, the trial's next
state, the searcher's event and the experiment's outcome are one transaction, which returns what
is left to do outside the store as `Effects` (ending other nodes' parts, waking preemption
long-polls, collecting checkpoints). Nothing a crash can interrupt is left half applied.

`Exit` is what an exit did, as a value: `exit_effects` turns it into the effects.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from dettui.errors import FailedPrecondition
from dettui.master import lifecycle, transitions
from dettui.master.effects import Done, Effects, EndPart, experiment_changed, notify
from dettui.master.searcher import sanity
from dettui.master.store import experiments as exp_store
from dettui.master.store import search as search_store
from dettui.master.store import trials as trial_store
from dettui.master.store import users as user_store
from dettui.master.store.records import Allocation, Experiment, Trial
from dettui.master.store.tx import command, step, transaction
from dettui.models import AllocationState, ExperimentState, TrialState


@dataclass(frozen=True)
class Exit:
    """What an exit leaves to do once committed."""

    alloc: Allocation
    end_parts: tuple[str, ...] = ()  # agents whose part to end now: another node failed
    daemons: bool = False  # ...or: they are daemons, and every worker part has exited
    trial: Trial | None = None  # the trial's new state, when the allocation ended
    searcher: search_store.Outcome = field(default_factory=search_store.Outcome)
    ended: Experiment | None = None  # the experiment, when it ended with this exit

    @property
    def done(self) -> bool:
        return self.trial is not None


def first_failure(alloc: Allocation) -> tuple[int | None, str]:
    """The exit of the part that failed first (reports keep their order), else the chief's.
    A daemon part's exit counts only while a worker part still ran: once every worker has
    exited the daemons are ended, and how they end does not matter (nor whether they are
    lost)."""
    workers = alloc.workers or alloc.agents
    exited = 0
    for agent, (code, reason) in alloc.part_exits.items():
        if agent in alloc.daemons and alloc.workers and exited == len(alloc.workers):
            continue
        exited += agent in alloc.workers
        if code != 0 or reason:
            return code, reason
    if any(a not in alloc.part_exits for a in workers):
        return None, lifecycle.LOST
    code, reason = alloc.part_exits[workers[0]]
    return code, reason


def _daemon_ended(alloc: Allocation, agent_id: str) -> bool:
    """Whether `agent_id`'s part is a daemon that exited after every worker part had."""
    return (agent_id in alloc.daemons and bool(alloc.workers)
            and all(w in alloc.part_exits for w in alloc.workers))


def _daemons_to_end(conn: sqlite3.Connection, alloc: Allocation) -> tuple[str, ...]:
    """Inside a transaction: once every worker part has exited, the daemon parts still running
    are to be ended (once: the allocation becomes TERMINATING)."""
    pending = [a for a in alloc.agents if a not in alloc.part_exits]
    if (not pending or alloc.state is AllocationState.TERMINATING
            or any(w in pending for w in alloc.workers)):
        return ()
    conn.execute("UPDATE allocations SET state=? WHERE id=?",
                 (AllocationState.TERMINATING.value, alloc.id))
    return tuple(pending)


@command
def mark_daemon(conn: sqlite3.Connection, alloc_id: str, agent_id: str) -> Done[bool]:
    """Determined's MarkAllocationResourcesDaemon: `agent_id`'s part is a daemon (the sshd of a
    non-chief DeepSpeed or Horovod node). None for an allocation of one part (Determined
    ignores the request: it would end it). If the workers have all exited already (or every
    part is now a daemon), the daemons still running are to be ended (`end_parts`)."""
    with transaction(conn):
        alloc = trial_store.allocation(conn, alloc_id)
        if alloc.state is AllocationState.EXITED:
            raise FailedPrecondition(f"allocation {alloc_id} has exited")
        if len(alloc.agents) <= 1:
            return Done(False)
        daemons = [a for a in alloc.agents if a in alloc.daemons or a == agent_id]
        conn.execute("UPDATE allocations SET daemons=? WHERE id=?",
                     (json.dumps(daemons), alloc_id))
        alloc = trial_store.allocation(conn, alloc_id)
        end_parts = _daemons_to_end(conn, alloc)
        done = Exit(trial_store.allocation(conn, alloc_id), end_parts, daemons=True)
        return Done(True, exit_effects(done, ""))


@command
def part_exit(conn: sqlite3.Connection, alloc_id: str, agent_id: str, exit_code: int | None,
              reason: str, connected: frozenset[str]) -> Effects:
    """`part_exit_in` in a transaction of its own, with its effects."""
    with transaction(conn):
        return exit_effects(part_exit_in(conn, alloc_id, agent_id, exit_code, reason,
                                         connected), f"node {agent_id} failed")


@step
def part_exit_in(conn: sqlite3.Connection, alloc_id: str, agent_id: str,
                 exit_code: int | None, reason: str, connected: frozenset[str]) -> Exit:
    """One agent's part of an allocation ended (the first report per agent counts). A failure
    ends the parts on the other agents, and so does the exit of the last worker part when
    the others are daemons; the allocation ends when every part has, or when the agents of
    the parts left are no longer `connected`."""
    alloc = trial_store.allocation(conn, alloc_id)
    if alloc.state is AllocationState.EXITED:
        return Exit(alloc)
    exits = dict(alloc.part_exits)
    exits.setdefault(agent_id, [exit_code, reason])
    conn.execute("UPDATE allocations SET part_exits=? WHERE id=?",
                 (json.dumps(exits), alloc_id))
    alloc = trial_store.allocation(conn, alloc_id)
    pending = [a for a in alloc.agents if a not in alloc.part_exits]
    failed = (exit_code != 0 or reason not in ("", None)) and \
        not _daemon_ended(alloc, agent_id)
    end_parts: tuple[str, ...] = ()
    daemons = False
    if failed and pending and not alloc.kill_requested:
        conn.execute("UPDATE allocations SET state=? WHERE id=?",
                     (AllocationState.TERMINATING.value, alloc_id))
        end_parts = tuple(pending)
    elif alloc.daemons:
        end_parts = _daemons_to_end(conn, alloc)
        daemons = bool(end_parts)
    if any(a in connected for a in pending):
        return Exit(trial_store.allocation(conn, alloc_id), end_parts, daemons=daemons)
    return _end(conn, alloc, *first_failure(alloc))


@command
def end(conn: sqlite3.Connection, alloc_id: str, exit_code: int | None, reason: str,
        message: str = "") -> Effects:
    """The whole allocation ends now: killed with no agent left to tell, or every part had
    exited. Idempotent: an allocation that has exited stays as it was."""
    with transaction(conn):
        alloc = trial_store.allocation(conn, alloc_id)
        if alloc.state is AllocationState.EXITED:
            return Effects()
        return exit_effects(_end(conn, alloc, exit_code, reason), "", message)


@command
def lose(conn: sqlite3.Connection, alloc_id: str, why: str) -> Effects:
    """A part of the allocation is gone with its agent: the parts still running elsewhere are
    ended and the allocation ends LOST (its trial goes back to the queue), in one commit."""
    with transaction(conn):
        return lose_in(conn, alloc_id, why)


@step
def lose_in(conn: sqlite3.Connection, alloc_id: str, why: str) -> Effects:
    """`lose` inside the caller's transaction."""
    alloc = trial_store.allocation(conn, alloc_id)
    if alloc.state is AllocationState.EXITED:
        return Effects()
    rest = tuple(EndPart(a, alloc.id, why) for a in alloc.agents if a not in alloc.part_exits)
    return Effects(end_parts=rest) | exit_effects(
        _end(conn, alloc, None, lifecycle.LOST), "", why)


@command
def lose_agent(conn: sqlite3.Connection, agent_id: str, why: str) -> Effects:
    """Every allocation with a part still running on `agent_id` is lost, in one commit."""
    lost = Effects()
    with transaction(conn):
        for alloc in trial_store.live_allocations_of(conn, agent_id):
            if agent_id not in alloc.part_exits:
                lost |= lose_in(conn, alloc.id, why)
    return lost


def exit_effects(done: Exit, why: str, message: str = "") -> Effects:
    """What an exit leaves to do: the other parts ended (`why`, or: they are daemons whose
    workers have all exited), and once the allocation has ended, followers told, the
    searcher's stops and creations performed, an ended experiment's checkpoints collected."""
    if done.daemons:
        why = "every worker part has exited: ending its daemons"
    out = Effects()
    if done.end_parts:
        out = Effects(end_parts=tuple(EndPart(a, done.alloc.id, why) for a in done.end_parts),
                      said=(f"allocation {done.alloc.id}: {why}; ending it on "
                            f"{', '.join(done.end_parts)}",))
    if done.trial is None:
        return out
    alloc, trial = done.alloc, done.trial
    return (out | Effects(exited=(alloc.id,), said=(
        f"allocation {alloc.id} {how_it_ended(alloc.exit_code, alloc.exit_reason or message)}"
        f" -> trial {trial.id} {trial.state.short}",))
        | notify(f"allocation:{alloc.id}")
        | experiment_changed(trial.experiment_id, trial.id, jobs=True)
        | searcher_effects(trial.experiment_id, done.searcher)
        | ended_effects(done.ended) | Effects(kick=True))


ENDED_WITHOUT_CODE = {lifecycle.LOST: "its agent was lost (gone, or restarted without it)",
                      lifecycle.KILLED: "killed", lifecycle.SPAWN_FAILED: "it could not start"}


def how_it_ended(code: int | None, reason: str) -> str:
    """An allocation's end in plain words: `exited with code 1`, `ended with no exit code: its
    agent was lost (...)` (the serve log's line; not `exited (code None lost)`)."""
    if code is None:
        return f"ended with no exit code: {ENDED_WITHOUT_CODE.get(reason, reason or 'unknown')}"
    said = "" if reason in ("", "exit", "error") else f" ({reason})"
    return f"exited with code {code}{said}"


def searcher_effects(exp_id: int, outcome: search_store.Outcome) -> Effects:
    """After a searcher event: the preemption of the trials it stopped (timed, their long-polls
    woken), followers told, the trials it created scheduled."""
    if not outcome.created and not outcome.stopped:
        return Effects()
    said = tuple(f"searcher of experiment {exp_id} stops allocation {a}"
                 for a in outcome.preempt)
    if outcome.created:
        said += (f"searcher of experiment {exp_id} created {len(outcome.created)} trial(s)",)
    return (Effects(preempted=tuple(outcome.preempt), said=said)
            | notify(*(f"trial:{t}" for t in outcome.stopped))
            | experiment_changed(exp_id, jobs=True) | Effects(kick=True))


def ended_effects(exp: Experiment | None) -> Effects:
    """An experiment ended (committed, with `gc_pending`): followers told, checkpoints
    collected."""
    if exp is None:
        return Effects()
    return experiment_changed(exp.id, jobs=True) | Effects(collect=(exp.id,))


def _end(conn: sqlite3.Connection, alloc: Allocation, exit_code: int | None,
         reason: str) -> Exit:
    trial = trial_store.get(conn, alloc.trial_id)
    exp = exp_store.get(conn, trial.experiment_id)
    state, restarts = lifecycle.decide_trial(lifecycle.ExitFacts(
        exit_code=exit_code, reason=reason, preempt_acked=alloc.preempt_acked,
        kill_requested=alloc.kill_requested, trial_state=trial.state,
        experiment_state=exp.state, restarts=trial.restarts, max_restarts=exp.max_restarts,
        searcher_stopped=trial.searcher_stopped))
    now = time.time()
    conn.execute(
        "UPDATE allocations SET state=?, end_time=?, exit_code=?, exit_reason=? WHERE id=?",
        (AllocationState.EXITED.value, now, exit_code,
         reason or ("exit" if exit_code == 0 else "error"), alloc.id))
    user_store.end_task_sessions(conn, alloc.id)
    conn.execute("UPDATE trials SET state=?, restarts=?, end_time=? WHERE id=?",
                 (state.value, restarts, now if state.is_terminal() else None, trial.id))
    trial = trial_store.get(conn, trial.id)
    if state is TrialState.ERROR and not alloc.kill_requested and (
            exit_code not in (0, None) or reason not in ("", lifecycle.LOST, lifecycle.KILLED)):
        _say_failure(conn, trial, exit_code, reason, alloc.id, min(restarts, exp.max_restarts))
    outcome = search_store.apply_end(conn, exp, trial) if state.is_terminal() else \
        search_store.Outcome()
    return Exit(trial_store.allocation(conn, alloc.id), trial=trial, searcher=outcome,
                ended=settle(conn, exp.id))


_AGENT_LINES = ("the entrypoint exited with code", "the entrypoint was ended by signal",
                "killing allocation")


def _say_failure(conn: sqlite3.Connection, trial: Trial, exit_code: int | None, reason: str,
                 alloc_id: str, restarts: int) -> None:
    """A trial failed for good (after `restarts` restarts): its experiment's warning says how
    it exited, and the last line it wrote (what `e describe` shows of an experiment that
    failed). Its followers are told with the exit's."""
    rows = conn.execute("SELECT log, stdtype, allocation_id, source FROM logs WHERE trial_id=? "
                        "ORDER BY id DESC LIMIT 200", (trial.id,)).fetchall()
    said = (str(r[0]).strip() for r in rows  # the trial's own: not the master's notes
            if r[1] == "stderr" and r[2] == alloc_id and r[3] != "master")
    last = next((line for line in said if line and not line.startswith(_AGENT_LINES)), "")
    before = search_store.warnings(conn, trial.experiment_id)
    search_store.add_warning(conn, trial.experiment_id, sanity.trial_failed(
        trial.id, exit_code, reason, last, restarts, before))


@step
def settle(conn: sqlite3.Connection, exp_id: int) -> Experiment | None:
    """Inside a transaction: end the experiment if every trial has ended (its checkpoints then
    wait for GC: `gc_pending`); the experiment if it ended now."""
    states = trial_store.states_of_experiment(conn, exp_id)
    if not all(s.is_terminal() for s in states):
        return None  # a trial runs or waits still (as experiment_outcome says, without a read)
    exp = exp_store.get(conn, exp_id)
    outcome = lifecycle.experiment_outcome(exp.state, states, searcher_done=True)
    if outcome is None:
        return None
    finish_experiment(conn, exp_id, outcome)
    return exp_store.get(conn, exp_id)


@step
def finish_experiment(conn: sqlite3.Connection, exp_id: int, state: ExperimentState,
                      end_time: float | None = None) -> None:
    """The experiment ends in `state`; its GC policy is due (inside a transaction)."""
    transitions.require(exp_store.get(conn, exp_id).state, state)
    conn.execute("UPDATE experiments SET state=?, end_time=?, gc_pending=1 WHERE id=?",
                 (state.value, end_time or time.time(), exp_id))
    if state is ExperimentState.COMPLETED:  # as Determined: 1 on COMPLETED only
        conn.execute("UPDATE experiments SET progress=1 WHERE id=?", (exp_id,))


@command
def settle_now(conn: sqlite3.Connection, exp_id: int) -> Effects:
    """`settle` in a transaction of its own."""
    with transaction(conn):
        return ended_effects(settle(conn, exp_id))


def ended_effects_of(exp_id: int) -> Effects:
    """The checkpoint collection of an experiment that ended with its GC pending (start-up)."""
    return Effects(collect=(exp_id,))


def gc_pending(conn: sqlite3.Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM experiments WHERE gc_pending=1")]


@command
def gc_done(conn: sqlite3.Connection, exp_id: int) -> Effects:
    with transaction(conn):
        conn.execute("UPDATE experiments SET gc_pending=0 WHERE id=?", (exp_id,))
    return Effects()


@step
def validation(conn: sqlite3.Connection, trial_id: int, steps: int,
               metrics: dict[str, Any]) -> Done[str | None]:
    """Inside the transaction of the validation's metrics: it reaches the searcher, and trials
    the searcher ends may end the experiment. The searcher's complaint, if any."""
    trial = trial_store.get(conn, trial_id)
    exp = exp_store.get(conn, trial.experiment_id)
    outcome = search_store.apply_validation(conn, exp, trial, steps, metrics)
    told = _say_stops(conn, exp, outcome, trial.id, steps)
    ended = settle(conn, exp.id) if outcome.ended else None
    # Its best value may have moved: followers of the experiments list re-read this one.
    return Done(outcome.error, notify("experiments", ids=[exp.id])
                | searcher_effects(exp.id, outcome) | ended_effects(ended) | told)


SEARCHER_STOPS = {"adaptive_asha": "ASHA: not promoted to the next rung",
                  "async_halving": "ASHA: not promoted to the next rung"}


def _say_stops(conn: sqlite3.Connection, exp: Experiment, outcome: search_store.Outcome,
               reporter: int, steps: int) -> Effects:
    """A line in the log of each running trial the searcher stopped, saying so: the trial's
    own (told to stop, as by a preemption) cannot tell why. `reporter` validated at `steps`."""
    why = SEARCHER_STOPS.get(exp.searcher_type, "the searcher needs no more of it")
    told = Effects()
    for trial_id in outcome.stopped:
        if trial_id in outcome.ended:  # it never ran
            continue
        trial = trial_store.get(conn, trial_id)
        at = steps if trial_id == reporter else trial.total_batches
        # a trial that reached max_time is done, not stopped: it was promoted as far as it goes
        if why.startswith("ASHA") and _reached_max_time(exp, at):
            continue
        told |= search_store.trial_log(conn, trial_id, trial.task_id,
                                       f"stopped by the searcher at step {at} ({why})\n",
                                       level="INFO")
    return told


def _reached_max_time(exp: Experiment, at: int) -> bool:
    """Whether a validation at step `at` was at the search's full length."""
    max_time = (exp.config.get("searcher") or {}).get("max_time")
    return isinstance(max_time, int) and at >= max_time


@command
def catch_up(conn: sqlite3.Connection, exp_id: int) -> Effects:
    """At start-up: what the searcher missed before a crash (events of older versions, which
    committed them apart), and the experiment's outcome if its last trial had ended."""
    with transaction(conn):
        outcome = search_store.catch_up(conn, exp_store.get(conn, exp_id))
        return searcher_effects(exp_id, outcome) | ended_effects(settle(conn, exp_id))


@command
def flag_stopped(conn: sqlite3.Connection) -> Effects:
    """Live allocations of trials their searcher stopped, not yet told: flag them (older
    versions committed the stop and the preemption apart); their ids."""
    with transaction(conn):
        rows = [r[0] for r in conn.execute(
            "SELECT a.id FROM allocations a JOIN trials t ON t.id = a.trial_id "
            "WHERE t.searcher_stopped=1 AND a.state != ? AND a.preempt_requested=0",
            (AllocationState.EXITED.value,))]
        conn.executemany("UPDATE allocations SET preempt_requested=1 WHERE id=?",
                         [(r,) for r in rows])
    return Effects(preempted=tuple(rows), said=tuple(
        f"allocation {r}: its trial was stopped by the searcher; preempting it" for r in rows))
