"""One-at-a-time reports from the Core API, for `bench/scale.py`: a training loop that calls
`core.train.report_training_metrics` once per step, in the environment of a real allocation
(the DET_* variables the master gave a simulated agent, plus DET_MASTER).

    python bench/_scale_core_worker.py ROWS BLOCK

First fills the client's bounded queue (QUEUE_LIMIT reports, not timed: they cost an enqueue
each), then prints one JSON line per block of BLOCK reports (`{"block": i, "rows": n,
"seconds": s}`: the training loop's wall time for those calls; with the queue full the loop
waits for the master, so this is the ingest rate), then `{"flush": seconds}` for the queue to be
drained and acknowledged when the context closes.
"""

from __future__ import annotations

import json
import sys
import time

from dettui import core
from dettui.core._train import QUEUE_LIMIT


def main() -> None:
    rows, block = int(sys.argv[1]), int(sys.argv[2])
    with core.init() as ctx:
        for i in range(1, QUEUE_LIMIT + 1):  # fills the client's queue: not timed
            ctx.train.report_training_metrics(steps_completed=i, metrics={"loss": 1.0 / i})
        print(json.dumps({"warmup": QUEUE_LIMIT}), flush=True)
        t0 = time.perf_counter()
        for i in range(QUEUE_LIMIT + 1, QUEUE_LIMIT + rows + 1):
            ctx.train.report_training_metrics(steps_completed=i, metrics={"loss": 1.0 / i})
            if (i - QUEUE_LIMIT) % block == 0:
                now = time.perf_counter()
                print(json.dumps({"block": (i - QUEUE_LIMIT) // block, "rows": block,
                                  "seconds": now - t0}),
                      flush=True)
                t0 = now
        t0 = time.perf_counter()
    print(json.dumps({"flush": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
