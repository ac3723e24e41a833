"""ahead-of / behind-of: the moved job takes the anchor's priority and sits right next to it."""

from __future__ import annotations

import pytest

from dettui.errors import FailedPrecondition, NotFound
from dettui.master.queue_moves import QueuedJob, move


def order_after(jobs: list[QueuedJob], job_id: str, anchor: str, ahead: bool) -> list[str]:
    priority, position = move(jobs, job_id, anchor, ahead)
    moved = [QueuedJob(j.job_id, priority, position) if j.job_id == job_id else j for j in jobs]
    return [j.job_id for j in sorted(moved, key=lambda j: (j.priority, j.position, j.job_id))]


JOBS = [QueuedJob("a", 42, 1.0), QueuedJob("b", 42, 2.0), QueuedJob("c", 42, 3.0),
        QueuedJob("u", 10, 5.0)]


@pytest.mark.parametrize(("job", "anchor", "ahead", "expected"), [
    ("c", "a", True, ["u", "c", "a", "b"]),
    ("c", "b", True, ["u", "a", "c", "b"]),
    ("a", "c", False, ["u", "b", "c", "a"]),
    ("a", "b", False, ["u", "b", "a", "c"]),
    ("c", "u", True, ["c", "u", "a", "b"]),
    ("u", "c", False, ["a", "b", "c", "u"]),
])
def test_moves(job: str, anchor: str, ahead: bool, expected: list[str]) -> None:
    assert order_after(JOBS, job, anchor, ahead) == expected


def test_takes_the_anchors_priority() -> None:
    assert move(JOBS, "a", "u", True)[0] == 10


def test_errors() -> None:
    with pytest.raises(NotFound, match="job zz not found"):
        move(JOBS, "zz", "a", True)
    with pytest.raises(FailedPrecondition, match="relative to itself"):
        move(JOBS, "a", "a", True)
