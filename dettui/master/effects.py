"""What a state transition leaves to do once it has committed: one frozen `Effects`.

Every store command that changes state returns it (alone, or with a value in `Done`), and one
dispatcher (`cluster/dispatcher.py`) performs it: the only code that sends to agents, notifies
followers, times preemptions, asks for a scheduling pass and collects checkpoints. Each effect
is idempotent and re-derivable after a crash from the committed state (kills from
`kill_requested`, preemptions from `preempt_requested`, starts from ASSIGNED allocations,
collection from `gc_pending`), so losing one with the process loses nothing.

Pure data: ids and text, no records, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Note:
    """Wake the followers of `topic`; `ids` names what changed (None: anything may have)."""

    topic: str
    ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Kill:
    """End an allocation's processes on every agent in `agents` (its parts still running).
    When none of them is connected, nobody is left to report the exit: the allocation ends
    now, killed (the dispatcher's rule)."""

    alloc_id: str
    agents: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class EndPart:
    """Tell one agent to end its part of an allocation (another node failed, a daemon outlived
    its workers, an agent lost); unreachable agents are not waited for."""

    agent_id: str
    alloc_id: str
    reason: str


@dataclass(frozen=True)
class Effects:
    notes: tuple[Note, ...] = ()
    kills: tuple[Kill, ...] = ()
    end_parts: tuple[EndPart, ...] = ()
    preempted: tuple[str, ...] = ()  # allocations whose preemption was committed: time it
    exited: tuple[str, ...] = ()  # allocations that ended: forget their timers
    starts: tuple[str, ...] = ()  # allocations whose start messages to send
    collect: tuple[int, ...] = ()  # experiments whose checkpoint GC is due (`gc_pending`)
    kick: bool = False  # ask for a scheduling pass
    said: tuple[str, ...] = ()  # what the transition tells the master's log

    def __or__(self, other: Effects) -> Effects:
        if not other:
            return self
        if not self:
            return other
        return Effects(**{f.name: (getattr(self, f.name) or getattr(other, f.name))
                          if f.name == "kick" else getattr(self, f.name) + getattr(other, f.name)
                          for f in fields(Effects)})

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(Effects))


NONE = Effects()


def notify(*topics: str, ids: Iterable[object] | None = None) -> Effects:
    """Followers of `topics` re-read (those of `ids` only, when given)."""
    named = None if ids is None else tuple(str(i) for i in ids)
    return Effects(notes=tuple(Note(t, named) for t in topics))


def experiment_changed(exp_id: int, *trial_ids: int, jobs: bool = False) -> Effects:
    """An experiment, and these of its trials (none named: any of them), changed: followers of
    the experiments list re-read that one, followers of its trials those trials."""
    notes = [Note("experiments", (str(exp_id),)),
             Note(f"experiment:{exp_id}", tuple(str(t) for t in trial_ids) or None),
             *(Note(f"trial:{t}") for t in trial_ids)]
    if jobs:
        notes.append(Note("jobs"))
    return Effects(notes=tuple(notes))


def merge(parts: Iterable[Effects]) -> Effects:
    out = NONE
    for part in parts:
        out = out | part
    return out


@dataclass(frozen=True)
class Done(Generic[T]):
    """A store command's answer when the caller needs a value besides the effects."""

    value: T
    effects: Effects = field(default=NONE)
