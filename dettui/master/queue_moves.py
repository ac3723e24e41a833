"""Moving a job in the queue: ahead-of / behind-of (pure; SEMANTICS §5.3 and seed 003).

The moved job takes the anchor's priority and a queue position right before (ahead-of) or
after (behind-of) it: the average of the anchor's position and its neighbour's on that side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dettui.errors import FailedPrecondition, NotFound


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    priority: int
    position: float


def move(jobs: Sequence[QueuedJob], job_id: str, anchor_id: str,
         ahead: bool) -> tuple[int, float]:
    """The (priority, position) that puts `job_id` right ahead of / behind `anchor_id`."""
    if job_id == anchor_id:
        raise FailedPrecondition("a job cannot be moved relative to itself")
    ordered = sorted(jobs, key=lambda j: (j.priority, j.position, j.job_id))
    ids = [j.job_id for j in ordered]
    for jid in (job_id, anchor_id):
        if jid not in ids:
            raise NotFound(f"job {jid} not found")
    others = [j for j in ordered if j.job_id != job_id]
    i = next(k for k, j in enumerate(others) if j.job_id == anchor_id)
    anchor = others[i]
    same = [j for j in others if j.priority == anchor.priority]
    k = same.index(anchor)
    if ahead:
        neighbour = same[k - 1].position if k > 0 else anchor.position - 1_000_000.0
    else:
        neighbour = same[k + 1].position if k + 1 < len(same) else anchor.position + 1_000_000.0
    position = (anchor.position + neighbour) / 2
    if position in (anchor.position, neighbour):
        raise FailedPrecondition("unable to compute a new job position")
    return anchor.priority, position
