"""One-at-a-time reports from the Core API, for `bench/scale.py`: a training loop that calls
`core.train.report_training_metrics` once per step, in the environment of a real allocation
(the DET_* variables the master gave a simulated agent, plus DET_MASTER).

    python bench/_scale_core_worker.py ROWS BLOCK

Prints one JSON line per block of BLOCK reports (`{"block": i, "rows": n, "seconds": s}`: the
training loop's wall time for those calls; the client's bounded queue makes the loop wait when
the master falls behind, so this is the ingest rate), then `{"flush": seconds}` for the rest to
be acknowledged when the context closes.
"""

from __future__ import annotations

import json
import sys
import time

from dettui import core


def main() -> None:
    rows, block = int(sys.argv[1]), int(sys.argv[2])
    with core.init() as ctx:
        t0 = time.perf_counter()
        for i in range(1, rows + 1):
            ctx.train.report_training_metrics(steps_completed=i, metrics={"loss": 1.0 / i})
            if i % block == 0:
                now = time.perf_counter()
                print(json.dumps({"block": i // block, "rows": block, "seconds": now - t0}),
                      flush=True)
                t0 = now
        t0 = time.perf_counter()
    print(json.dumps({"flush": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
