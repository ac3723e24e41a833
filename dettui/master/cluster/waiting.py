"""The queue as the scheduler sees it, kept between passes: the live jobs and, for each active
one, its first queued trials as requests. A pass reads again only the experiments the store
marked as changed since the last pass (store/waiting.py), so its cost follows what changed,
not the size of the queue; a whole read happens at the first pass, after a failed one, when
many changed at once, and every RESYNC seconds all the same.

Touched by one pass at a time (on the CPU pool's thread), never concurrently.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Collection, Iterator

from dettui.master import scheduler
from dettui.master.store.records import Job
from dettui.master.store.waiting import Read

HEADS = 64  # queued trials read of a job at least, so that free slots come and go unread
RESYNC = 300.0  # seconds between whole reads (a safety net: the store marks every change)


_KEY = operator.attrgetter("key")


def request(trial_id: int, job: Job) -> scheduler.Request:
    return scheduler.Request(
        key=trial_id, job_id=job.job_id, slots=job.slots_per_trial, priority=job.priority,
        queue_position=job.queue_position, pool=job.resource_pool, weight=job.weight,
        max_slots=job.max_slots)


class Waiting:
    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}  # live experiments (active, paused, stopping) by id
        self.heads: dict[int, tuple[scheduler.Request, ...]] = {}  # active, with queued trials
        self.counts: dict[int, int] = {}  # how many each of those has queued in all
        self.short: dict[int, int] = {}  # jobs with more queued than read -> how many read
        self.experiment_of: dict[int, int] = {}  # queued trial read -> its experiment
        self.whole_at: float | None = None  # when the last whole read was (monotonic)
        # The jobs of `heads` in the scheduler's order, (priority, queue position, id), sorted:
        # kept as jobs change, so a pass hands its requests over in order, unsorted.
        self.order: list[tuple[int, float, int]] = []
        self.place: dict[int, tuple[int, float, int]] = {}  # job -> its entry in `order`
        # How many jobs of `heads` ask for each (pool, slots per trial): a pass learns the
        # pools and whether any request could never fit without going through the requests.
        self.shapes: Counter[tuple[str, int]] = Counter()

    def reset(self) -> None:
        """Read the whole queue at the next pass (a pass failed after taking the changes)."""
        self.whole_at = None

    def wants(self, per_job: int, now: float) -> tuple[list[int], int, bool]:
        """What the next read must cover for a pass that may start `per_job` trials of a job:
        the jobs read short of that, how many trials to read of each, whether to read all."""
        also = [e for e, n in self.short.items() if n < per_job]
        whole = self.whole_at is None or now - self.whole_at >= RESYNC
        return also, max(per_job, HEADS), whole

    def apply(self, read: Read, now: float) -> None:
        if read.whole:
            self.jobs, self.heads, self.counts, self.short = {}, {}, {}, {}
            self.experiment_of, self.order, self.place = {}, [], {}
            self.shapes = Counter()
            self.whole_at = now
        else:
            for exp_id in read.ids:
                old = self.jobs.pop(exp_id, None)
                self.counts.pop(exp_id, None)
                self.short.pop(exp_id, None)
                reqs = self.heads.pop(exp_id, ())
                for req in reqs:
                    self.experiment_of.pop(req.key, None)
                if reqs and old is not None:
                    self._count(old, -1)
                if (place := self.place.pop(exp_id, None)) is not None:
                    del self.order[bisect_left(self.order, place)]
        self.jobs.update(read.jobs)
        for exp_id, first in read.heads.items():
            job = read.jobs[exp_id]
            self.heads[exp_id] = tuple(request(t, job) for t in first)
            self._count(job, 1)
            self.counts[exp_id] = n = read.counts[exp_id]
            if n > len(first):
                self.short[exp_id] = len(first)
            for t in first:
                self.experiment_of[t] = exp_id
            self.place[exp_id] = place = (job.priority, job.queue_position, exp_id)
            if not read.whole:
                insort(self.order, place)
        if read.whole:
            self.order = sorted(self.place.values())

    def _count(self, job: Job, n: int) -> None:
        key = (job.resource_pool, job.slots_per_trial)
        self.shapes[key] += n
        if not self.shapes[key]:
            del self.shapes[key]

    def queue(self, per_job: int) -> Kept:
        """The first `per_job` queued trials of each active job, as a pass takes them
        (`scheduler.Queue`): one at a time, in the scheduler's order."""
        return Kept(self, per_job)

    def requests(self, per_job: int) -> list[scheduler.Request]:
        """All of `queue`'s requests, in order (every pool's)."""
        kept = self.queue(per_job)
        return scheduler.order(r for pool in kept.pools() for r in kept.in_order(pool))

    def unread(self, per_job: int) -> dict[str, int]:
        """The slots of each job's queued trials left out of `queue` (fair share counts them
        as demand)."""
        jobs = self.jobs
        return {jobs[e].job_id: jobs[e].slots_per_trial * (n - per_job)
                for e, n in self.counts.items() if n > per_job}

    def any_unread(self, per_job: int) -> bool:
        """Whether some job has more queued trials than `queue` hands over."""
        return any(n > per_job for n in self.counts.values())


class Kept:
    """A pass's view of the kept queue (`scheduler.Queue`)."""

    def __init__(self, waiting: Waiting, per_job: int) -> None:
        self.waiting = waiting
        self.per_job = per_job
        self._pools = {pool for pool, _ in waiting.shapes}

    def pools(self) -> Collection[str]:
        return self._pools

    def sizes(self, pool: str) -> Collection[int]:
        return {slots for p, slots in self.waiting.shapes if p == pool}

    def in_order(self, pool: str) -> Iterator[scheduler.Request]:
        w, per_job = self.waiting, self.per_job
        order, heads, jobs = w.order, w.heads, w.jobs
        mixed = len(self._pools) > 1
        i, end = 0, len(order)
        while i < end:
            priority, position, exp_id = order[i]
            j = i + 1
            while j < end and order[j][1] == position and order[j][0] == priority:
                j += 1
            if j == i + 1:  # a job's requests are in trial id order already
                if not mixed or jobs[exp_id].resource_pool == pool:
                    yield from heads[exp_id][:per_job]
            else:  # jobs queued at the same place: their trials by id, as `order` sorts them
                yield from sorted((r for _, _, e in order[i:j]
                                   if not mixed or jobs[e].resource_pool == pool
                                   for r in heads[e][:per_job]), key=_KEY)
            i = j
