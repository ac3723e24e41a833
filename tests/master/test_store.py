"""The SQLite store: migrations, WAL, durability of committed changes across a reopen."""

from __future__ import annotations

from pathlib import Path

from dettui.master.store import db as dbmod
from dettui.master.store import experiments, trials, users
from dettui.models import TrialState


def test_migrations_are_numbered_and_applied_once(tmp_path: Path) -> None:
    conn = dbmod.connect(tmp_path / "m.db")
    latest = max(n for n, _, _ in dbmod._migrations())
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dbmod.migrate(conn) == latest  # nothing to do the second time
    conn.close()


def test_committed_changes_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    conn = dbmod.connect(path)
    users.ensure_default_users(conn, None)
    owner = users.by_name(conn, "determined")
    assert owner is not None
    new = experiments.NewExperiment(
        name="x", description=None, labels=[], owner_id=owner.id, config={"resources": {}},
        original_config="name: x", searcher_type="single", resource_pool="default",
        priority=42, weight=1.0, max_slots=None, context=b"tgz")
    exp, made = experiments.create(conn, new, [({"lr": 0.1}, 7)])
    alloc = trials.allocate(conn, made[0].id, "agent-1", [0])
    # No close, no checkpoint: a second connection (like a restarted master) sees it all.
    other = dbmod.connect(path)
    assert experiments.get(other, exp.id).name == "x"
    assert experiments.context(other, exp.id) == b"tgz"
    assert trials.get(other, made[0].id).state is TrialState.RUNNING
    assert trials.allocation(other, alloc.id).run_id == 1


def test_passwords_are_salted_and_checked(tmp_path: Path) -> None:
    conn = dbmod.connect(tmp_path / "m.db")
    users.ensure_default_users(conn, "s3cret")
    admin = users.by_name(conn, "admin")
    assert admin is not None and admin.password_hash.startswith("pbkdf2$")
    assert users.password_matches(admin, users.client_hash("s3cret"))
    assert not users.password_matches(admin, users.client_hash("wrong"))
    assert not users.password_matches(admin, "")
    determined = users.by_name(conn, "determined")
    assert determined is not None and users.password_matches(determined,
                                                             users.client_hash("s3cret"))
