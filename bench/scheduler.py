"""One scheduling pass for 100, 1,000 and 10,000 queued jobs over 1,000 agents (8 slots each,
half of them busy), timed in CPU seconds; prints the growth ratios against n and n log n.

    .venv/bin/python bench/scheduler.py
"""

from __future__ import annotations

import math
import random
import statistics
import time

from dettui.master.cluster.scheduling import KeptQueue
from dettui.master.scheduler import AgentView, PoolPolicy, Request, Running, schedule
from dettui.master.store.queue_reads import Read
from dettui.master.store.records import Job
from dettui.models import ExperimentState

AGENTS = 1000
SLOTS = 8


def cluster(rng: random.Random) -> tuple[list[AgentView], list[Running]]:
    agents, running = [], []
    for i in range(AGENTS):
        used = tuple(range(SLOTS // 2)) if i % 2 == 0 else ()
        agents.append(AgentView(f"agent-{i:04d}", "default", tuple(range(SLOTS)),
                                frozenset(used)))
        for s in used:
            running.append(Running(f"a{i}.{s}", f"job-r{i}", 1, rng.randint(1, 99), float(i),
                                   "default", float(i), placement=((f"agent-{i:04d}", (s,)),)))
    return agents, running


def queue(n: int, rng: random.Random) -> list[Request]:
    return [Request(k, f"job-{k}", rng.choice((1, 1, 1, 2, 4, 8)), rng.randint(1, 99),
                    float(k), "default") for k in range(n)]


def cpu_time(fn: object, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        samples.append(time.process_time() - t0)
    return statistics.median(samples)


def main() -> None:
    rng = random.Random(7)
    agents, running = cluster(rng)
    print(f"{AGENTS} agents x {SLOTS} slots, {len(running)} slots busy; one pass each, "
          "median CPU time")
    results = {}
    for preemption in (False, True):
        policies = {"default": PoolPolicy(preemption=preemption)}
        for n in (100, 1_000, 10_000):
            reqs = queue(n, rng)
            t = cpu_time(lambda r=reqs, p=policies: schedule(r, agents, running, p),
                         repeat=7 if n < 10_000 else 5)
            results[(preemption, n)] = t
            print(f"  preemption={'on ' if preemption else 'off'}  {n:>6} jobs: "
                  f"{t * 1000:8.2f} ms")
    for preemption in (False, True):
        small, big = results[(preemption, 1_000)], results[(preemption, 10_000)]
        nlogn = (10_000 * math.log(10_000)) / (1_000 * math.log(1_000))
        print(f"growth 1,000 -> 10,000 jobs (preemption {'on' if preemption else 'off'}): "
              f"{big / small:.1f}x  (n: 10.0x, n log n: {nlogn:.1f}x)")
    worst = max(results[(p, 10_000)] for p in (False, True))
    print(f"10,000 jobs: {worst * 1000:.2f} ms (target < 10 ms of CPU)")
    kept_queue(agents, running)


def kept_queue(agents: list[AgentView], running: list[Running]) -> None:
    """The master's pass: the queue kept between passes (10,000 jobs of 10 queued trials, the
    first `per_job` of each read), with few slots free. The pass takes requests one by one and
    stops when the slots are gone; side by side, the same pass handed every request."""
    kept = KeptQueue()
    jobs = {e: Job(e, f"job-{e}", ExperimentState.ACTIVE, "default", 42, 1.0, None, float(e), 1)
            for e in range(1, 10_001)}
    heads = {e: list(range(e * 10, e * 10 + 10)) for e in jobs}
    kept.apply(Read(True, set(jobs), jobs, heads, {e: 10 for e in jobs}, 64), 0.0)
    full = [AgentView(a.id, a.pool, a.slot_ids, frozenset(a.slot_ids[:5] if i == 0 else
                                                          a.slot_ids))
            for i, a in enumerate(agents)]  # 3 slots free in all
    per_job = sum(len(a.free) for a in full) + 1
    lazy = cpu_time(lambda: schedule(kept.queue(per_job), full, running), repeat=7)
    every = cpu_time(lambda: schedule(kept.requests(per_job), full, running, ordered=True),
                     repeat=7)
    print(f"the kept queue, 10,000 jobs x 10 trials, 3 slots free: a pass {lazy * 1000:.2f} ms; "
          f"handed all {per_job * 10_000:,} requests {every * 1000:.2f} ms "
          f"({every / lazy:.0f}x)")


if __name__ == "__main__":
    main()
