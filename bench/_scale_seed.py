"""Metric rows written straight into a stopped master's SQLite file, for `bench/scale.py`.

Ten million reports through the API would take hours on this machine (and the API's ingest is
measured on its own); written in bulk with one `executemany` per chunk of 200,000 rows, with
`synchronous=OFF` while the master is stopped, they take minutes. The rows are what the API
would have stored for training reports (`metrics` table: one row per report, `avgMetrics` as
JSON, `archived` 0), spread evenly over the trials that exist (but those the ingest phase
reports to), `training` every 100 steps and a
`validation` row every tenth; the master is then started again on that file.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

CHUNK = 200_000


def _values(rows: int, trials: list[tuple[int, int]], t0: float) -> Iterator[tuple[object, ...]]:
    rng = random.Random(13)
    texts = [f'{{"loss": {rng.random():.6f}, "accuracy": {rng.random():.6f}}}'
             for _ in range(997)]
    per_trial, extra = divmod(rows, len(trials))
    n = 0
    for i, (trial_id, run_id) in enumerate(trials):
        for k in range(per_trial + (1 if i < extra else 0)):
            group = "validation" if k % 10 == 9 else "training"
            n += 1
            yield (trial_id, run_id, group, (k + 1) * 100, t0 + n * 1e-3, texts[n % 997])


def seed(db_path: Path, rows: int, progress: bool = True) -> dict[str, float]:
    """Insert `rows` metric rows over every trial of the store at `db_path` (master stopped).
    Returns what it did: rows, trials, seconds, rows/s."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-512000")  # 500 MB of page cache for the index
        trials = [(int(t), max(int(r), 1)) for t, r in conn.execute(
            "SELECT t.id, t.run_id FROM trials t JOIN experiments e ON e.id = t.experiment_id "
            "WHERE e.name NOT LIKE 'hold-%' ORDER BY t.id")]
        if not trials:
            raise RuntimeError("no trials to seed metrics for")
        start = time.perf_counter()
        values = _values(rows, trials, time.time() - 86400)
        done = 0
        while done < rows:
            chunk = [v for _, v in zip(range(CHUNK), values, strict=False)]
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO metrics (trial_id, run_id, grp, steps_completed, "
                             "report_time, metrics) VALUES (?,?,?,?,?,?)", chunk)
            conn.execute("COMMIT")
            done += len(chunk)
            if progress and done % (CHUNK * 10) == 0:
                rate = done / (time.perf_counter() - start)
                print(f"    seeded {done:,} rows ({rate:,.0f} rows/s)", flush=True)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        seconds = time.perf_counter() - start
    finally:
        conn.close()
    return {"rows": rows, "trials": len(trials), "seconds": seconds, "rate": rows / seconds}
