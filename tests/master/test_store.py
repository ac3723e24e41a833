"""The store: migrations, durability of committed changes across a reopen, what the reports
keep up to date; on SQLite and on PostgreSQL (`store_target`), but for SQLite's own migrations
of older versions (a PostgreSQL store starts at its baseline: tests/master/test_pg_store.py)."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dettui.config import load_config
from dettui.master import scheduler
from dettui.master.cluster import scheduling as waiting_cluster
from dettui.master.cluster.scheduling import KeptQueue as Waiting
from dettui.master.settings import MasterSettings
from dettui.master.store import control, exits, experiments, queue_reads, trials, users
from dettui.master.store import db as dbmod
from dettui.master.store.tx import transaction
from dettui.models import AllocationState, ExperimentState, TrialState
from tests.master.conftest import SIMPLE_CONFIG, TEST_MINT


def test_sqlite_migrations_are_numbered_and_applied_once(tmp_path: Path) -> None:
    conn = dbmod.connect(tmp_path / "m.db")
    latest = max(n for n, _, _ in dbmod._migrations())
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dbmod.migrate(conn) == latest  # nothing to do the second time
    conn.close()


def _trial(target: Path | str) -> tuple[sqlite3.Connection, int]:
    """A store with one experiment (context b"tgz") and its one trial's id."""
    conn = dbmod.connect(target)
    users.ensure_default_users(conn, None)
    owner = users.by_name(conn, "determined")
    assert owner is not None
    config = load_config(SIMPLE_CONFIG).to_expconf()  # a stored config is a full expconf
    new = experiments.NewExperiment(
        name="x", description=None, labels=[], owner_id=owner.id, config=config,
        original_config="name: x", searcher_type="single", resource_pool="default",
        priority=42, weight=1.0, max_slots=None, context=b"tgz")
    _, made = experiments.create(conn, new, [({"lr": 0.1}, 7)]).value
    return conn, made[0]


def test_committed_changes_survive_a_reopen(store_target: Path | str) -> None:
    conn, trial_id = _trial(store_target)
    exp_id = trials.get(conn, trial_id).experiment_id
    alloc = trials.allocate(conn, trial_id, "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None
    # No close, no checkpoint: a second connection (like a restarted master) sees it all.
    other = dbmod.connect(store_target)
    assert experiments.get(other, exp_id).name == "x"
    assert experiments.context(other, exp_id) == b"tgz"
    assert trials.get(other, trial_id).state is TrialState.RUNNING
    assert trials.allocation(other, alloc.id).run_id == 1


def test_passwords_are_salted_and_checked(store_target: Path | str) -> None:
    """`--admin-password` gives admin and determined the same password, each with a salt of
    its own (before, both had one stored hash: the same salt and digest)."""
    conn = dbmod.connect(store_target)
    users.ensure_default_users(conn, "s3cret")
    admin = users.by_name(conn, "admin")
    assert admin is not None and admin.password_hash.startswith("scrypt$16384$8$5$")
    assert users.password_matches(admin.password_hash, users.client_hash("s3cret"))
    assert not users.password_matches(admin.password_hash, users.client_hash("wrong"))
    assert not users.password_matches(admin.password_hash, "")
    determined = users.by_name(conn, "determined")
    assert determined is not None and users.password_matches(determined.password_hash,
                                                             users.client_hash("s3cret"))
    assert determined.password_hash.split("$")[4:] != admin.password_hash.split("$")[4:]
    assert determined.password_hash.split("$")[4] != admin.password_hash.split("$")[4]


def test_the_id_high_water_mark_starts_from_existing_rows(tmp_path: Path) -> None:
    """A SQLite store made before ids were tracked (version 8) keeps its biggest ids as the
    floor."""

    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    for number, _name, sql in dbmod._migrations():
        if number <= 8:
            for statement in dbmod._split(sql):
                conn.execute(statement)
    conn.execute("PRAGMA user_version=8")
    conn.execute("INSERT INTO users (id, username) VALUES (1, 'u')")
    for exp_id in (1, 2, 7):
        conn.execute("INSERT INTO experiments (id, name, state, owner_id, config, "
                     "original_config, searcher_type, job_id, resource_pool, priority, "
                     "queue_position, start_time) VALUES (?, 'e', 'STATE_COMPLETED', 1, '{}', "
                     "'', 'single', ?, 'default', 42, 0, 0)", (exp_id, f"job-{exp_id}"))
    conn.close()
    conn = dbmod.connect(tmp_path / "old.db")
    conn.execute("DELETE FROM experiments WHERE id=7")
    from dettui.master.store import ids

    assert ids.next_id(conn, "experiments") == 8
    assert ids.next_id(conn, "trials") == 1
    assert ids.next_ids(conn, "trials", 3) == [2, 3, 4]  # a block: one read, one write
    assert ids.next_ids(conn, "trials", 0) == []
    assert ids.next_id(conn, "trials") == 5  # none of the block given again
    conn.close()



def test_a_newer_run_archives_what_older_runs_reported_past_its_step(
        store_target: Path | str) -> None:
    """SEMANTICS §3.2: a report of a newer run archives older runs' rows of the trial past its
    step (its own group at its step too), however the reports of each run are ordered."""
    from dettui.master.store import metrics

    conn, trial = _trial(store_target)

    def report(run: int, group: str, steps: int) -> None:
        metrics.report(conn, trial_id=trial, run_id=run, group=group, steps=steps,
                       report_time=float(steps), metrics={"x": run}, batch_metrics=None)

    def live() -> list[tuple[int, str, int]]:
        return sorted((m.run_id, m.group, m.steps_completed)
                      for m in metrics.for_trial(conn, trial))

    for steps in (10, 20, 30, 40):
        report(1, "training", steps)
    report(1, "validation", 20)
    report(1, "validation", 40)
    report(2, "training", 30)  # restarted from the checkpoint at 20, reports at 30
    assert live() == [(1, "training", 10), (1, "training", 20), (1, "validation", 20),
                      (2, "training", 30)]
    report(2, "training", 40)  # later steps of the same run archive nothing more
    report(2, "validation", 20)  # ...but a lower step does: run 1's validation at 20 goes
    assert live() == [(1, "training", 10), (1, "training", 20), (2, "training", 30),
                      (2, "training", 40), (2, "validation", 20)]
    report(3, "validation", 10)  # a third run from step 10: its own group at 10 and past
    assert live() == [(1, "training", 10), (3, "validation", 10)]


def _watch_contexts(conn: Any, reads: list[str]) -> Callable[[], None]:
    """Record in `reads` each column of the contexts table the connection reads: SQLite's
    authorizer sees every read; on PostgreSQL (no views or triggers in the schema, so a
    statement reads the table only if it names it), the columns each such statement names.
    Returns how to stop."""
    if getattr(conn, "dialect", "") == "postgresql":
        plain = conn.execute

        def execute(sql: str, args: Any = ()) -> Any:
            if re.search(r"\bcontexts\b", sql):
                reads.extend(c for c in ("experiment_id", "targz") if c in sql)
            return plain(sql, args)

        conn.execute = execute
        return lambda: delattr(conn, "execute")

    def watch(action: int, table: str | None, column: str | None, *_: object) -> int:
        if action == sqlite3.SQLITE_READ and table == "contexts":
            reads.append(str(column))
        return sqlite3.SQLITE_OK

    conn.set_authorizer(watch)
    return lambda: conn.set_authorizer(None)


async def test_no_list_or_pass_reads_a_context(master_settings: MasterSettings,
                                               aiohttp_client: object) -> None:
    """Contexts live in their own table, read only by the agent's download and model_def: the
    lists, the job queue, an experiment, its trials and scheduling passes never touch it."""
    import asyncio
    import base64

    from dettui.master.app import create_app
    from dettui.master.http import appkeys
    from tests.master.conftest import SIMPLE_CONFIG, Api

    client = await aiohttp_client(create_app(master_settings))  # type: ignore[operator]
    resp = await client.post("/api/v1/auth/login", json={"username": "determined"})
    api = Api(client, (await resp.json())["token"])
    files = [{"path": "train.py", "type": 48, "mtime": "1700000000", "mode": 33188, "uid": 0,
              "gid": 0, "content": base64.b64encode(b"x" * 100_000).decode()}]
    for _ in range(3):
        await api.call("POST", "/api/v1/experiments", {
            "config": SIMPLE_CONFIG, "modelDefinition": files, "activate": True})
    db = client.server.app[appkeys.DB]
    reads: list[str] = []
    # the store connection and every reader connection (lists are read on those)
    stops = [await db.call(_watch_contexts, conn, reads) for conn in (db.conn, *db.readers)]
    try:
        for path in ("/api/v1/experiments", "/api/v1/experiments/2", "/api/v1/job-queues-v2",
                     "/api/v1/experiments/2/trials", "/api/v1/trials/2", "/api/v1/agents"):
            await api.call("GET", path)
        client.server.app[appkeys.CLUSTER].kick()
        await asyncio.sleep(0.3)  # a scheduling pass
        assert reads == [], reads
        await api.call("GET", "/api/v1/experiments/2/model_def")
        assert "targz" in reads  # the watch sees a context read when there is one
    finally:
        for stop in stops:
            await db.call(stop)


def test_contexts_move_to_their_own_table_with_migration_12(tmp_path: Path) -> None:
    """SQLite's migration 12 (a PostgreSQL store starts at the baseline, after it)."""

    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.row_factory = sqlite3.Row
    for number, _name, sql in dbmod._migrations():
        if number < 12:
            for statement in dbmod._split(sql):
                old.execute(statement)
            old.execute(f"PRAGMA user_version={number}")
    old.execute("INSERT INTO users (id, username) VALUES (1, 'u')")
    for n, ctx in ((1, b"tgz-1"), (2, None)):
        old.execute("INSERT INTO experiments (id, name, state, owner_id, config, "
                    "original_config, searcher_type, job_id, resource_pool, priority, "
                    "queue_position, start_time, context) VALUES (?, 'x', 'STATE_ACTIVE', 1, "
                    "'{}', '', 'single', ?, 'default', 42, 0, 0, ?)", (n, f"job-{n}", ctx))
    old.close()
    conn = dbmod.connect(path)  # migrates
    assert experiments.context(conn, 1) == b"tgz-1" and experiments.context(conn, 2) is None
    cols = [r[1] for r in conn.execute("PRAGMA table_info(experiments)")]
    assert "context" not in cols


def test_an_experiments_best_validation_is_kept_as_reports_arrive(
        store_target: Path | str) -> None:
    """By dettui.metric's rules (numbers only, NaN never best, the first of equals), updated by
    each validation, recomputed when a restart archives the best, and computed once for rows of
    older versions."""
    from dettui.master.store import metrics

    conn, first = _trial(store_target)
    exp_id = trials.get(conn, first).experiment_id
    second = experiments.add_trial(conn, exp_id, {"lr": 0.2}, 8).value.id

    def validate(trial: int, run: int, steps: int, value: object) -> tuple[object, object]:
        metrics.report(conn, trial_id=trial, run_id=run, group="validation", steps=steps,
                       report_time=0.0, metrics={"loss": value}, batch_metrics=None)
        exp = experiments.get(conn, exp_id)
        return exp.best, exp.best_trial_id

    assert validate(first, 1, 10, 0.5) == (0.5, first)
    assert validate(second, 1, 10, float("nan")) == (0.5, first)
    assert validate(second, 1, 20, "0.1") == (0.5, first)  # not a number
    assert validate(second, 1, 30, 0.5) == (0.5, first)  # equal: the first stays
    assert validate(second, 1, 40, 0.2) == (0.2, second)
    # the second trial restarts from step 10: its reports past 10 are archived, and with them
    # the best; a report of the new run puts the experiment's best back to what is left
    assert validate(second, 2, 15, 0.9) == (0.5, first)
    conn.execute("UPDATE experiments SET best_value=NULL, best_trial_id=NULL, best_stale=1")
    assert metrics.refresh_stale_bests(conn).value == (1, None)
    exp = experiments.get(conn, exp_id)
    assert (exp.best, exp.best_trial_id) == (0.5, first)


def test_a_trials_summary_and_best_are_kept_as_reports_arrive(
        store_target: Path | str) -> None:
    """Folded report by report, they equal what folding every live report gives, through a
    merge into a stored report, a restart that archives reports, and older versions' rows."""
    from dettui.master import summary
    from dettui.master.store import metrics

    conn, trial_id = _trial(store_target)

    def report(run: int, group: str, steps: int, values: dict[str, object]) -> None:
        metrics.report(conn, trial_id=trial_id, run_id=run, group=group, steps=steps,
                       report_time=0.0, metrics=values, batch_metrics=None)

    def kept() -> tuple[object, object]:
        return metrics.trial_summaries(conn, [trial_id])[trial_id]

    def recomputed() -> object:
        return summary.summarize(metrics.reports(conn, trial_id))

    for step in range(1, 6):
        report(1, "training", step * 10, {"loss": 1.0 / step, "lr": 0.1})
    report(1, "validation", 20, {"loss": 0.4})
    report(1, "validation", 40, {"loss": 0.3})
    report(1, "validation", 50, {"loss": float("nan")})
    assert kept() == (recomputed(), 40)
    assert kept()[0]["avg_metrics"]["loss"]["count"] == 5
    report(1, "training", 50, {"extra": 7})  # merged into the stored report of step 50
    assert kept() == (recomputed(), 40)
    assert kept()[0]["avg_metrics"]["extra"]["last"] == 7
    report(2, "validation", 30, {"loss": 0.35})  # run 2 from step 30: step 40 is archived
    assert kept() == (recomputed(), 30)
    assert kept()[0]["validation_metrics"]["loss"]["count"] == 2
    conn.execute("UPDATE trials SET summary_metrics=NULL, best_steps=NULL, summary_stale=1")
    assert metrics.refresh_stale_trials(conn).value == (1, None)
    assert kept() == (recomputed(), 30)


def test_a_stale_backfill_goes_in_chunks_that_resume_after_their_cursor(
        store_target: Path | str) -> None:
    """At start-up the master computes stale summaries chunk by chunk while it serves: a
    chunk stops at its time budget (after one row at least) and says where the next goes on."""
    from dettui.master.store import metrics

    conn, first = _trial(store_target)
    config = load_config(SIMPLE_CONFIG).to_expconf()
    new = experiments.NewExperiment(
        name="y", description=None, labels=[], owner_id=experiments.get(conn, 1).owner_id,
        config=config, original_config="name: y", searcher_type="single",
        resource_pool="default", priority=42, weight=1.0, max_slots=None, context=b"tgz")
    _, ids = experiments.create(conn, new, [({"lr": 0.1}, i) for i in range(5)]).value
    for i, trial_id in enumerate(ids):
        metrics.report(conn, trial_id=trial_id, run_id=1, group="training", steps=10,
                       report_time=0.0, metrics={"loss": float(i)}, batch_metrics=None)
    conn.execute("UPDATE trials SET summary_metrics=NULL, summary_stale=1")
    conn.execute("UPDATE trials SET summary_stale=0 WHERE id=?", (ids[2],))
    seen: list[int] = []
    after: int | None = 0
    while after is not None:
        done, after = metrics.refresh_stale_trials(conn, after, budget=0.0).value
        if after is not None:
            assert done == 1  # a zero budget still computes one row a chunk
            seen.append(after)
    assert done == 0  # the last call found none left
    from dettui.master.store import tx

    plan = tx.CrashPlan(at=0, after=False)  # counts commits, never fires
    conn.crash_plan = plan  # type: ignore[attr-defined]
    assert metrics.refresh_stale_trials(conn).value == (0, None)
    assert metrics.refresh_stale_bests(conn).value == (0, None)
    assert plan.commits == 0  # nothing stale: no empty commit at each start-up
    conn.crash_plan = None  # type: ignore[attr-defined]
    assert seen == [first, ids[0], ids[1], ids[3], ids[4]]  # the fresh one skipped, none twice
    assert conn.execute("SELECT COUNT(*) FROM trials WHERE summary_stale=1").fetchone()[0] == 0
    last = metrics.trial_summaries(conn, [ids[4]])[ids[4]][0]
    assert last["avg_metrics"]["loss"]["last"] == 4.0


def _experiments(conn: sqlite3.Connection, *sizes: int) -> list[tuple[int, list[int]]]:
    users.ensure_default_users(conn, "")
    owner = users.by_name(conn, "determined")
    assert owner is not None
    made = []
    for n in sizes:
        new = experiments.NewExperiment(
            name="x", description=None, labels=[], owner_id=owner.id,
            config=load_config(SIMPLE_CONFIG).to_expconf(), original_config="name: x",
            searcher_type="single", resource_pool="default", priority=42, weight=1.0,
            max_slots=None, context=None)
        exp, ts = experiments.create(conn, new, [({"lr": i}, i) for i in range(n)]).value
        made.append((exp.id, ts))
    return made


def test_a_scheduling_pass_reads_the_first_trials_of_each_job_and_counts_the_rest(
        store_target: Path | str) -> None:
    conn = dbmod.connect(store_target)
    (a, a_trials), (b, b_trials), (c, c_trials) = _experiments(conn, 5, 1, 3)
    trials.allocate(conn, a_trials[0], "agent-1", [0], mint=TEST_MINT)  # running: not pending
    read = queue_reads.read(conn, None, (), 2)
    assert read.whole and set(read.jobs) == read.ids == {a, b, c}
    assert read.heads == {a: a_trials[1:3], b: b_trials[:1], c: c_trials[:2]}
    assert read.counts == {a: 4, b: 1, c: 3}
    assert sum(map(len, queue_reads.read(conn, None, (), 100).heads.values())) == 8
    assert queue_reads.read(conn, None, (), 1).heads == {a: [a_trials[1]], b: [b_trials[0]],
                                                     c: [c_trials[0]]}
    control.stop(conn, c, ExperimentState.PAUSED)  # a paused job's trials wait for nothing
    read = queue_reads.read(conn, None, (), 1)
    assert read.counts == {a: 4, b: 1} and read.jobs[c].state is ExperimentState.PAUSED


def _kept_equals_whole(conn: sqlite3.Connection, kept: Waiting, seen: queue_reads.Watch,
                       per_job: int) -> queue_reads.Read:
    """Bring `kept` up to date as a pass does, and check it against a whole read."""
    also, limit, _ = kept.wants(per_job, 0.0)
    read = queue_reads.read(conn, seen, also, limit)
    kept.apply(read, 0.0)
    fresh = Waiting()
    fresh.apply(queue_reads.read(conn, None, (), limit, whole=True), 0.0)
    assert kept.jobs == fresh.jobs
    assert kept.counts == fresh.counts
    assert {e: [r.key for r in h[:per_job]] for e, h in kept.heads.items()} == \
        {e: [r.key for r in h[:per_job]] for e, h in fresh.heads.items()}
    assert kept.order == fresh.order
    live, experiment_of = queue_reads.running(conn, seen)  # the live allocations kept the same way
    whole_live, whole_of = queue_reads.running(conn)
    assert {a.id: a for a in live} == {a.id: a for a in whole_live} and len(live) == len(whole_live)
    assert experiment_of == whole_of
    handed = [r for pool in kept.queue(per_job).pools()
              for r in kept.queue(per_job).in_order(pool)]  # as a pass takes them, unsorted
    assert handed == fresh.requests(per_job) == scheduler.order(handed)
    assert kept.unread(per_job) == fresh.unread(per_job)
    assert kept.shapes == fresh.shapes
    assert {t: e for t, e in kept.experiment_of.items()
            if any(r.key == t for r in kept.heads[e][:per_job])} == \
        {t: e for t, e in fresh.experiment_of.items()
         if any(r.key == t for r in fresh.heads[e][:per_job])}
    return read


def test_the_queue_kept_between_passes_is_a_whole_read_after_every_kind_of_change(
        store_target: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler keeps the queue between passes and reads again only what the store marked
    as changed: after each kind of change it equals a whole read, and reads no more than the
    experiments changed."""
    monkeypatch.setattr(waiting_cluster, "HEADS", 2)  # jobs read short, and read on when needed
    conn = dbmod.connect(store_target)
    seen = queue_reads.watch(conn)
    if seen is None:  # PostgreSQL: nothing marks changes, every pass reads the whole queue
        assert queue_reads.read(conn, None, (), 1).whole
        return
    (a, a_trials), (b, b_trials), (c, c_trials) = _experiments(conn, 5, 1, 3)
    kept = Waiting()
    first = queue_reads.read(conn, seen, (), 2, whole=True)
    kept.apply(first, 0.0)
    assert kept.short == {a: 2, c: 2}

    alloc = trials.allocate(conn, a_trials[0], "agent-1", [0], mint=TEST_MINT)
    assert alloc is not None
    assert _kept_equals_whole(conn, kept, seen, 1).ids == {a}  # only the changed job is read
    assert _kept_equals_whole(conn, kept, seen, 1).ids == set()  # nothing changed since
    assert _kept_equals_whole(conn, kept, seen, 4).ids == {a, c}  # 4 free: read on, short ones
    assert kept.short == {}
    control.stop(conn, c, ExperimentState.PAUSED)
    assert _kept_equals_whole(conn, kept, seen, 2).ids == {c}
    assert c not in kept.heads and kept.jobs[c].state is ExperimentState.PAUSED
    control.activate(conn, c)
    _kept_equals_whole(conn, kept, seen, 2)
    experiments.update_fields(conn, b, priority=7)
    assert _kept_equals_whole(conn, kept, seen, 2).ids == {b}
    assert kept.heads[b][0].priority == 7
    experiments.update_fields(conn, b, name="renamed", progress=0.5)  # not what places a job
    assert _kept_equals_whole(conn, kept, seen, 2).ids == set()
    experiments.add_trial(conn, b, {"lr": 9}, 9)
    assert _kept_equals_whole(conn, kept, seen, 2).ids == {b}
    exits.end(conn, alloc.id, 1, "error")  # the trial fails, or goes back to the queue
    _kept_equals_whole(conn, kept, seen, 2)
    with pytest.raises(RuntimeError), transaction(conn):  # rolled back: marks, changes nothing
        conn.execute("UPDATE trials SET state=? WHERE experiment_id=?",
                     (TrialState.CANCELED.value, b))
        raise RuntimeError
    _kept_equals_whole(conn, kept, seen, 2)
    control.stop(conn, a, ExperimentState.STOPPING_KILLED)
    _kept_equals_whole(conn, kept, seen, 2)
    assert a not in kept.heads
    control.stop(conn, c, ExperimentState.STOPPING_CANCELED)
    _kept_equals_whole(conn, kept, seen, 2)
    experiments.begin_delete(conn, c)
    experiments.delete(conn, c)
    _kept_equals_whole(conn, kept, seen, 2)
    assert c not in kept.jobs
    assert set(kept.jobs) == {b} and [r.key for r in kept.heads[b]] == [b_trials[0],
                                                                        max(kept.experiment_of)]


def test_an_agents_live_allocations_are_read_alone(store_target: Path | str) -> None:
    """What a heartbeat reconciles: the live allocations with a part on that agent (a chief
    or any other part), not its neighbours' (a LIKE wildcard in the id matches no more)."""
    conn = dbmod.connect(store_target)
    ((_, made),) = _experiments(conn, 3)
    one = trials.allocate(conn, made[0], "w_1", [0], mint=TEST_MINT)
    two = trials.allocate(conn, made[1], "wx1", [0], [("wx1", [0]), ("w_1", [1])], 30000,
                          mint=TEST_MINT)
    three = trials.allocate(conn, made[2], "w_10", [0], mint=TEST_MINT)
    assert one and two and three
    assert [a.id for a in trials.live_allocations_of(conn, "w_1")] == [one.id, two.id]
    assert [a.id for a in trials.live_allocations_of(conn, "wx1")] == [two.id]
    assert [a.id for a in trials.live_allocations_of(conn, 'odd"id')] == []


def test_the_slots_in_use_are_those_of_the_live_allocations(store_target: Path | str) -> None:
    """GET /api/v1/agents' slots (`slots_in_use`, four columns read) say what the live
    allocations whole say: each part's slots on its agent with its container id (the node
    rank), nothing of an allocation that exited."""
    conn = dbmod.connect(store_target)
    ((_, made),) = _experiments(conn, 3)
    one = trials.allocate(conn, made[0], "a", [0, 1], mint=TEST_MINT)
    two = trials.allocate(conn, made[1], "b", [0], [("b", [0]), ("a", [2, 3])], 30000,
                          mint=TEST_MINT)
    three = trials.allocate(conn, made[2], "c", [5], mint=TEST_MINT)
    assert one and two and three
    conn.execute("UPDATE allocations SET state=? WHERE id=?",
                 (AllocationState.EXITED.value, three.id))
    conn.commit()
    whole: dict[str, dict[int, str]] = {}
    for alloc in trials.live_allocations(conn):
        for agent, slots in alloc.parts:
            for slot in slots:
                whole.setdefault(agent, {})[slot] = alloc.container_id(agent)
    assert trials.slots_in_use(conn) == whole == {
        "a": {0: one.container_id("a"), 1: one.container_id("a"),
              2: two.container_id("a"), 3: two.container_id("a")},
        "b": {0: two.container_id("b")}}
    assert two.container_id("a").endswith(".1") and two.container_id("b").endswith(".0")


def test_a_scheduling_pass_starts_its_trials_in_one_call(store_target: Path | str) -> None:
    """`allocate_many`: every placement of a pass in one call, a commit each (the crash-point
    harness needs a run's commits not to depend on timing); a trial that stopped waiting since
    the pass read the queue gets None and the others still start."""
    from dettui.master.store import tx

    conn, first = _trial(store_target)
    new = experiments.NewExperiment(
        name="y", description=None, labels=[], owner_id=experiments.get(conn, 1).owner_id,
        config=load_config(SIMPLE_CONFIG).to_expconf(), original_config="name: y",
        searcher_type="single", resource_pool="default", priority=42, weight=1.0,
        max_slots=None, context=b"tgz")
    _, ids = experiments.create(conn, new, [({"lr": 0.1}, i) for i in range(3)]).value
    conn.execute("UPDATE trials SET state=? WHERE id=?", (TrialState.CANCELED.value, ids[1]))
    conn.commit()
    plan = tx.CrashPlan(at=0, after=False)  # counts commits, never fires
    conn.crash_plan = plan  # type: ignore[attr-defined]
    done = trials.allocate_many(conn, [
        trials.Placement(first, "agent-1", [0]), trials.Placement(ids[1], "agent-1", [1]),
        trials.Placement(ids[2], "agent-2", [0, 1], [("agent-2", [0, 1]), ("agent-3", [0])],
                         30004)], mint=TEST_MINT)
    got = done.value
    assert plan.commits == 3  # one each, as three passes would have made
    assert [a is None for a in got] == [False, True, False]
    assert got[0] is not None and got[2] is not None
    # The started ones' messages are sent; the skipped one has the queue planned again.
    assert done.effects.starts == (got[0].id, got[2].id) and done.effects.kick
    assert (got[0].trial_id, got[0].agents, got[0].run_id) == (first, ["agent-1"], 1)
    assert (got[2].agents, got[2].port) == (["agent-2", "agent-3"], 30004)
    assert [trials.get(conn, t).state for t in (first, ids[1], ids[2])] == [
        TrialState.RUNNING, TrialState.CANCELED, TrialState.RUNNING]
    assert trials.allocation_by_token(conn, TEST_MINT.allocation(got[2].id)) == got[2]


def test_a_large_context_is_stored_in_pieces_and_read_back_whole(store_target: Path | str) -> None:
    """A context over one piece (4 MiB) goes into its row piece by piece on SQLite (bound whole
    SQLite would copy all of it first); read back, it is the same bytes."""
    conn = dbmod.connect(store_target)
    users.ensure_default_users(conn, "")
    owner = users.by_name(conn, "determined")
    assert owner is not None
    for size in (10, experiments._PIECE, 2 * experiments._PIECE + 12345):
        data = os.urandom(size)
        new = experiments.NewExperiment(
            name="ctx", description=None, labels=[], owner_id=owner.id,
            config=load_config(SIMPLE_CONFIG).to_expconf(), original_config="name: ctx",
            searcher_type="single", resource_pool="default", priority=42, weight=1.0,
            max_slots=None, context=data)
        exp, _ = experiments.create(conn, new, [({"lr": 0.1}, 1)]).value
        assert experiments.context(conn, exp.id) == data
