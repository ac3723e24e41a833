"""MLflow's side of the ingest comparison in `bench/scale.py`; runs in `.venv-mlflow`.

    .venv-mlflow/bin/python bench/_scale_mlflow_worker.py URL BATCHED_METRICS SINGLE_CALLS

One client, one run, calls one after another (as dettui's side is measured): `log_batch` with
1,000 metrics per call (100 keys x 10 steps, MLflow's per-call maximum), then `log_metric` one
metric at a time. Prints one JSON object: metrics, seconds and metrics/s of each.
"""

from __future__ import annotations

import json
import sys
import time

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

KEYS = 100
STEPS_PER_CALL = 10


def main() -> None:
    url, batched, single = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = MlflowClient(tracking_uri=url)
    exp_id = client.create_experiment(f"scale-{time.time_ns()}")
    run_id = client.create_run(exp_id).info.run_id
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric("warmup", 0.0, now, 0)])
    calls = max(batched // (KEYS * STEPS_PER_CALL), 1)
    t0 = time.perf_counter()
    for c in range(calls):
        client.log_batch(run_id, metrics=[
            Metric(f"m{k:03d}", (c + s + k) * 1e-3, now, c * STEPS_PER_CALL + s)
            for s in range(STEPS_PER_CALL) for k in range(KEYS)])
    batch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(single):
        client.log_metric(run_id, "single", i * 1e-3, step=i)
    single_s = time.perf_counter() - t0
    n = calls * KEYS * STEPS_PER_CALL
    print(json.dumps({"batched": {"metrics": n, "calls": calls, "seconds": batch_s,
                                  "rate": n / batch_s},
                      "single": {"metrics": single, "calls": single, "seconds": single_s,
                                 "rate": single / single_s}}))


if __name__ == "__main__":
    main()
