"""The crash-point harness: the scenario of `crashsim` with the master killed (simulated) just
before or just after each of its commits in turn, restarted on the same database, and driven to
the end. The committed state must be consistent at the crash and after the restart's recovery,
before any client retries (`crashsim.INVARIANTS`), and every run must end as the scenario
implies, with nothing acknowledged lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dettui.master.store import tx
from dettui.master.store.db import connect
from tests.master.crashsim import Scenario, inconsistencies
from tests.pg_cluster import PgCluster


def check(s: Scenario) -> None:
    conn = connect(s.settings.db_target)
    try:
        states = {r["name"]: r["state"]
                  for r in conn.execute("SELECT name, state FROM experiments")}
        assert states == {"single": "STATE_COMPLETED", "grid": "STATE_CANCELED"}, states
        live = conn.execute("SELECT id, state FROM allocations WHERE state != 'EXITED'").fetchall()
        assert not live, [tuple(r) for r in live]
        stuck = conn.execute("SELECT id, state FROM trials WHERE state NOT IN "
                             "('STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR')").fetchall()
        assert not stuck, [tuple(r) for r in stuck]
        rows = conn.execute("SELECT trial_id, run_id, grp, steps_completed FROM metrics").fetchall()
        stored = [tuple(r) for r in rows]
        assert len(stored) == len(set(stored)), f"duplicated metrics: {stored}"
        assert s.acked_metrics <= set(stored), s.acked_metrics - set(stored)
        ckpts = {r["uuid"] for r in conn.execute("SELECT uuid FROM checkpoints")}
        assert s.acked_checkpoints <= ckpts, s.acked_checkpoints - ckpts
    finally:
        conn.close()
    assert not inconsistencies(s.settings.db_target)


@pytest.fixture
def scenario(backend: str, request: pytest.FixtureRequest) -> Callable[..., Scenario]:
    """A new scenario on a store of its own: a SQLite file in its dir, or a PostgreSQL
    database (the previous scenario's, emptied: each is checked before the next starts)."""
    if backend == "sqlite":
        return Scenario
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    taken: list[str] = []

    def new(tmp: Path, plan: tx.CrashPlan) -> Scenario:
        if taken:
            cluster.give_back(taken.pop())
        taken.append(cluster.take_database())
        return Scenario(tmp, plan, db_url=cluster.url(taken[-1]))

    request.addfinalizer(lambda: [cluster.give_back(name) for name in taken])
    return new


async def run(scenario: Callable[..., Scenario], tmp: Path, plan: tx.CrashPlan) -> Scenario:
    s = scenario(tmp, plan)
    try:
        await s.run()
    finally:
        await s.stop()
    check(s)
    return s


def crash_points(trail: list[str], backend: str) -> list[int]:
    """The commits to crash at: every one on SQLite; on PostgreSQL (twice as slow a run) the
    first commit of each store function, so that every kind of commit is crashed at, before
    and after, on both."""
    if backend == "sqlite":
        return list(range(1, len(trail) + 1))
    return sorted({fn: at for at, fn in reversed(list(enumerate(trail, 1)))}.values())


async def test_every_commit_of_the_scenario(tmp_path: Path, backend: str,
                                            scenario: Callable[..., Scenario]) -> None:
    clean = await run(scenario, tmp_path / "clean", tx.CrashPlan(at=0, after=False))
    total = clean.plan.commits
    assert clean.restarts == 0 and total > 20
    points = crash_points(clean.plan.trail, backend)
    assert len(points) >= 10, clean.plan.trail
    failures = []
    for at in points:
        for after in (False, True):
            where = tmp_path / f"{at}-{'after' if after else 'before'}"
            try:
                s = await run(scenario, where, tx.CrashPlan(at=at, after=after))
                assert s.plan.fired and s.restarts >= 1
            except AssertionError as exc:
                failures.append(f"crash {'after' if after else 'before'} commit {at}: {exc}")
    assert not failures, f"{len(failures)} of {2 * len(points)} crash points fail:\n" + "\n".join(
        f[:600] for f in failures)
