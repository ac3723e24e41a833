"""The crash-point harness: the scenario of `crashsim` with the master killed (simulated) just
before or just after each of its commits in turn, restarted on the same database, and driven to
the end. The committed state must be consistent at the crash and after the restart's recovery,
before any client retries (`crashsim.INVARIANTS`), and every run must end as the scenario
implies, with nothing acknowledged lost."""

from __future__ import annotations

from pathlib import Path

from dettui.master.store import tx
from dettui.master.store.db import connect
from tests.master.crashsim import Scenario, inconsistencies


def check(s: Scenario) -> None:
    conn = connect(s.settings.db_path)
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
    assert not inconsistencies(s.settings.db_path)


async def run(tmp: Path, plan: tx.CrashPlan) -> Scenario:
    s = Scenario(tmp, plan)
    try:
        await s.run()
    finally:
        await s.stop()
    check(s)
    return s


async def test_every_commit_of_the_scenario(tmp_path: Path) -> None:
    clean = await run(tmp_path / "clean", tx.CrashPlan(at=0, after=False))
    total = clean.plan.commits
    assert clean.restarts == 0 and total > 20
    failures = []
    for at in range(1, total + 1):
        for after in (False, True):
            where = tmp_path / f"{at}-{'after' if after else 'before'}"
            try:
                s = await run(where, tx.CrashPlan(at=at, after=after))
                assert s.plan.fired and s.restarts >= 1
            except AssertionError as exc:
                failures.append(f"crash {'after' if after else 'before'} commit {at}: {exc}")
    assert not failures, f"{len(failures)} of {2 * total} crash points fail:\n" + "\n".join(
        f[:600] for f in failures)
