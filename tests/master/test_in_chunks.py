"""Reads of many ids bind them in chunks: an experiment of 40,000 trials (a grid may have
100,000) is within SQLite's and PostgreSQL's limits on bound parameters (32,767 for asyncpg)."""

from __future__ import annotations

from pathlib import Path

from dettui.master.store import db as dbmod
from dettui.master.store import experiments, metrics, trials

MANY = list(range(1, 40_001))


def test_reads_of_many_ids_stay_within_the_bound_parameter_limit(
        store_target: Path | str) -> None:
    conn = dbmod.connect(store_target)
    try:
        assert metrics.validations_with(conn, MANY, "loss") == []
        assert trials.of_experiment(conn, 1, MANY) == []
        assert trials.running_of(conn, MANY) == []
        assert trials.queued_counts(conn, MANY) == {}
        assert trials.experiment_ids(conn, MANY) == {}
        assert trials.for_experiments(conn, MANY) == []
        assert experiments.job_views(conn, MANY) == []
        assert experiments.of_ids(conn, MANY) == []  # the stream's changed experiments
        assert metrics.trial_summaries(conn, MANY) == {}
    finally:
        conn.close()


def test_validations_of_many_trials_come_in_one_order(store_target: Path | str) -> None:
    """Read in chunks, the validations of 1,200 trials are still ordered by steps, then by
    report, as one statement ordered them (a best metric's ties go to the first)."""
    conn = dbmod.connect(store_target)
    try:
        conn.execute("INSERT INTO users (id, username) VALUES (7, 'u')")
        conn.execute(
            "INSERT INTO experiments (id, name, state, owner_id, config, original_config, "
            "searcher_type, job_id, resource_pool, priority, queue_position, start_time) "
            "VALUES (1, 'x', 'STATE_ACTIVE', 7, '{}', '', 'grid', 'job-1', 'default', 42, 0, 0)")
        ids = list(range(1, 1201))
        for t in ids:
            conn.execute("INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, "
                         "seed, state, start_time) "
                         "VALUES (?, 1, ?, ?, '{}', 0, 'STATE_ACTIVE', 0)",
                         (t, f"r{t}", f"task-{t}"))
        for step in (300, 100, 200):
            for t in reversed(ids):
                conn.execute(
                    "INSERT INTO metrics (trial_id, run_id, grp, steps_completed, report_time, "
                    "metrics) VALUES (?, 1, 'validation', ?, 0, ?)",
                    (t, step, f'{{"loss": {t}}}'))
        found = metrics.validations_with(conn, ids, "loss")
        assert len(found) == 3600
        want = [(s, t) for s in (100, 200, 300) for t in reversed(ids)]  # steps, then id
        assert [(m.steps_completed, m.trial_id) for m in found] == want
    finally:
        conn.close()
