"""The metric rows of `bench/scale.py`, seeded in two ways.

First through the real API (`seed_api`): POST /api/v1/trials/{id}/metrics/batch, one request
per trial holding all of that trial's training reports, a few requests in flight, for a time
budget; the rate it reached is reported. What is left of the rows when the budget is spent
(ten million reports through the API would take hours on this 2-core machine, and the API's
ingest is measured on its own in phase 5) is written straight into the stopped master's SQLite
file (`seed`): one `executemany` per chunk of 200,000 rows with `synchronous=OFF`, the rows the
API would have stored (`metrics` table: one row per report, `avgMetrics` as JSON, `archived`
0), `training` every 100 steps and a `validation` row every tenth, over the trials the API did
not seed; the searchers are told they saw the validations, and the experiments' bests and
the trials' summaries are marked stale, so the master computes them after it starts, as it
does for an older version's database. Neither touches the trials of the experiments
the ingest phase reports to (`hold-*`).
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from dettui.master.store.search import SEEN

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


TRIALS_SQL = ("SELECT t.id, t.run_id FROM trials t JOIN experiments e ON e.id = t.experiment_id "
              "WHERE e.name NOT LIKE 'hold-%' ORDER BY t.id")


def trials_of(db_path: Path) -> list[tuple[int, int]]:
    """Every seedable trial and its current run, read-only (the master may be running)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [(int(t), int(r)) for t, r in conn.execute(TRIALS_SQL)]
    finally:
        conn.close()


async def seed_api(url: str, token: str, db_path: Path, rows: int, budget: float,
                   concurrency: int = 8) -> dict[str, Any]:
    """Training reports through the batch route, trial after trial from the newest (the
    least likely to be started meanwhile: a started trial's new run refuses the old run's
    reports, counted as refused), `rows // trials` reports each, until `rows` or `budget`
    seconds. Returns rows, refused, trials (the ids seeded), seconds, rate."""
    trials = trials_of(db_path)
    per_trial = max(rows // max(len(trials), 1), 1)
    todo = iter(reversed(trials))
    done: list[int] = []
    out: dict[str, Any] = {"rows": 0, "refused": 0, "errors": 0}
    texts = [{"loss": random.Random(k).random(), "accuracy": random.Random(-k).random()}
             for k in range(97)]
    t0 = time.perf_counter()
    deadline = t0 + budget

    async def worker(session: aiohttp.ClientSession) -> None:
        for trial_id, run_id in todo:
            if out["rows"] + per_trial > rows or time.perf_counter() > deadline:
                return
            reports = [{"group": "training", "metrics": {
                "trialId": trial_id, "trialRunId": run_id, "stepsCompleted": (k + 1) * 100,
                "metrics": {"avgMetrics": texts[(trial_id + k) % 97]}}}
                for k in range(per_trial)]
            try:
                async with session.post(f"{url}/api/v1/trials/{trial_id}/metrics/batch",
                                        data=json.dumps({"reports": reports}),
                                        headers={"Content-Type": "application/json"}) as resp:
                    answer = await resp.json() if resp.status == 200 else None
            except (aiohttp.ClientError, TimeoutError):
                answer = None
            if answer is None:
                out["errors"] += 1
                continue
            refused = len(answer.get("refused", []))
            out["refused"] += refused
            out["rows"] += per_trial - refused
            if not refused:
                done.append(trial_id)

    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"},
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    out.update(trials=done, seconds=seconds, rate=out["rows"] / seconds if seconds else 0.0,
               per_trial=per_trial)
    return out


def _as_the_api_leaves_it(conn: sqlite3.Connection, trial_ids: list[int]) -> None:
    """What the master keeps beside the rows when they come through the API: each searcher has
    seen its trials' validations (else the master's start-up replays a million of them to the
    searchers, which no crash leaves behind). The experiments' bests and the trials' summaries
    are marked stale, as for an older version's database: the master computes them in the
    background after it starts (phase 3 reports how long that took)."""
    seen: dict[int, dict[str, int]] = {}
    for exp_id, search_id, steps in conn.execute(
            "SELECT t.experiment_id, t.search_id, MAX(m.steps_completed) FROM trials t "
            "JOIN metrics m ON m.trial_id = t.id AND m.grp = 'validation' "
            "WHERE t.search_id IS NOT NULL GROUP BY t.id"):
        seen.setdefault(int(exp_id), {})[str(search_id)] = int(steps)
    conn.execute("BEGIN")
    for exp_id, text in conn.execute("SELECT id, searcher_state FROM experiments").fetchall():
        if exp_id not in seen:
            continue
        state = json.loads(text) if text else {}
        state.setdefault(SEEN, {}).update(seen[exp_id])
        conn.execute("UPDATE experiments SET searcher_state=? WHERE id=?",
                     (json.dumps(state), exp_id))
    conn.execute("UPDATE experiments SET best_stale = 1 WHERE name NOT LIKE 'hold-%'")
    conn.executemany("UPDATE trials SET summary_stale = 1 WHERE id=?", [(t,) for t in trial_ids])
    conn.execute("COMMIT")


def seed(db_path: Path, rows: int, progress: bool = True,
         exclude: frozenset[int] = frozenset()) -> dict[str, float]:
    """Insert `rows` metric rows over the trials of the store at `db_path` (master stopped),
    but those in `exclude`. Returns what it did: rows, trials, seconds, rows/s."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-512000")  # 500 MB of page cache for the index
        trials = [(int(t), max(int(r), 1)) for t, r in conn.execute(TRIALS_SQL)
                  if int(t) not in exclude]
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
        _as_the_api_leaves_it(conn, [t for t, _ in trials])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        seconds = time.perf_counter() - start
    finally:
        conn.close()
    return {"rows": rows, "trials": len(trials), "seconds": seconds, "rate": rows / seconds}
