"""The PostgreSQL store: its adapter (placeholders, results as sqlite3 gives them, the crash plan
of store/tx.py), its migrations in step with SQLite's (the same tables, columns and indexes),
one master per database, and what the two databases store alike."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dettui.errors import InvalidArgument, MasterRunning
from dettui.master.store import db as dbmod
from dettui.master.store import logs, pg, tx, users
from tests.master.conftest import Api
from tests.master.test_api import create

SQLITE_TYPES = {"INTEGER": "bigint", "REAL": "double precision", "TEXT": "text", "BLOB": "bytea"}


@pytest.mark.parametrize(("sql", "want"), [
    ("SELECT a FROM t WHERE b=? AND c IN (?,?)", "SELECT a FROM t WHERE b=$1 AND c IN ($2,$3)"),
    ("SELECT '?', \"?\" FROM t WHERE x=?", "SELECT '?', \"?\" FROM t WHERE x=$1"),
    ("SELECT 'it''s ?' WHERE y=? -- why?\nAND z=?",
     "SELECT 'it''s ?' WHERE y=$1 -- why?\nAND z=$2"),
    ("UPDATE t SET a=? WHERE id=?", "UPDATE t SET a=$1 WHERE id=$2"),
])
def test_placeholders_are_numbered_outside_quotes_and_comments(sql: str, want: str) -> None:
    assert pg.translate(sql)[0] == want


def test_what_a_statement_gives_back() -> None:
    assert pg.translate("SELECT 1")[1] == pg.ROWS
    assert pg.translate("  with x as (select 1) select * from x")[1] == pg.ROWS
    assert pg.translate("INSERT INTO t (a) VALUES (?) RETURNING id")[1] == pg.RETURNING
    assert pg.translate("INSERT INTO t (a) VALUES (?)\nRETURNING id")[1] == pg.RETURNING
    assert pg.translate("UPDATE t SET a=1")[1] == pg.COMMAND


def test_a_password_never_shows() -> None:
    assert pg.redact("postgresql://u:s3cret@h:5/d") == "postgresql://u:***@h:5/d"
    assert pg.redact("postgresql://u@h/d") == "postgresql://u@h/d"


def _sqlite_schema(path: Path) -> tuple[dict[str, dict[str, tuple[str, bool]]], set[str]]:
    conn = dbmod.connect(path)
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    columns = {t: {r["name"]: (SQLITE_TYPES[r["type"]], bool(r["notnull"] or r["pk"]))
                   for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
    indexes = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL")}
    conn.close()
    return columns, indexes


def _pg_schema(url: str) -> tuple[dict[str, dict[str, tuple[str, bool]]], set[str]]:
    conn = pg.connect(url)
    columns: dict[str, dict[str, tuple[str, bool]]] = {}
    for r in conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable FROM "
            "information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name != 'schema_version'"):
        columns.setdefault(r[0], {})[r[1]] = (r[2], r[3] == "NO")
    indexes = {r[0] for r in conn.execute(  # but those of PRIMARY KEY and UNIQUE constraints
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname "
        "NOT IN (SELECT conname FROM pg_constraint WHERE contype IN ('p', 'u'))")}
    conn.close()
    return columns, indexes


def test_both_stores_have_the_same_tables_columns_and_indexes(tmp_path: Path,
                                                               pg_url: str) -> None:
    """The PostgreSQL baseline (and any later migration in both folders) gives the schema that
    SQLite's migrations give: every table, column (its type, 8-byte numbers and all, and whether
    it may be NULL) and named index."""
    lite_columns, lite_indexes = _sqlite_schema(tmp_path / "m.db")
    pg_columns, pg_indexes = _pg_schema(pg_url)
    assert sorted(pg_columns) == sorted(lite_columns)
    for table, cols in lite_columns.items():
        assert pg_columns[table] == cols, table
    assert pg_indexes == lite_indexes
    assert "queue_position" in lite_columns["experiments"]  # the comparison has substance


def test_postgresql_migrations_keep_step_with_sqlites(pg_url: str) -> None:
    conn = pg.connect(pg_url)
    latest = max(n for n, _, _ in dbmod._migrations())
    assert max(n for n, _, _ in pg.migrations()) == latest
    assert pg.version(conn) == latest
    assert pg.migrate(conn) == latest  # nothing to do the second time
    assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
    conn.close()


def test_one_master_per_database(pg_url: str, pg_cluster: Any) -> None:
    """A master holds its database's advisory lock for as long as its connection lives: a
    second one is refused with a sentence that names the database (never its password), and
    takes over once the first has gone. Another database is another master's."""
    first = dbmod.Database(pg_url)
    with_password = pg_url.replace("postgres@", "postgres:s3cret@")
    second = pg.Connection(with_password)
    other = pg.Connection(pg_cluster.url("postgres"))
    try:
        with pytest.raises(MasterRunning) as refused:
            pg.lock_master(second, patience=0.3)
        assert "another dettui master already uses the database" in str(refused.value)
        assert "s3cret" not in str(refused.value) and "postgres:***@" in str(refused.value)
        pg.lock_master(other, patience=0)
        first.close()
        pg.lock_master(second, patience=5.0)
    finally:
        second.close()
        other.close()


def test_a_crash_plan_fires_on_postgresql_too(pg_url: str) -> None:
    """store/tx.py's simulated crash: just before a commit the change is rolled back, just
    after it the change stays; a dead master commits nothing more."""
    for after, kept in ((False, 0), (True, 1)):
        conn = pg.connect(pg_url)
        conn.crash_plan = tx.CrashPlan(at=1, after=after)
        with pytest.raises(tx.SimulatedCrash), tx.transaction(conn):
            conn.execute("INSERT INTO cluster (key, value) VALUES (?, ?)", (f"k{after}", "v"))
        with pytest.raises(tx.SimulatedCrash), tx.transaction(conn):
            pass
        other = pg.connect(pg_url)
        assert other.execute("SELECT COUNT(*) FROM cluster WHERE key=?",
                             (f"k{after}",)).fetchone()[0] == kept
        other.close()
        conn.close()


def test_changes_are_counted_as_sqlite_counts_them(store_target: Path | str) -> None:
    """Row counts of UPDATE and of many INSERTs (lines an agent sent again are not counted),
    ids handed out by RETURNING, rows read by name and by position: alike on both."""
    conn = dbmod.connect(store_target)
    users.ensure_default_users(conn, None)
    ids = [users.create(conn, f"u{n}", "", admin=False).value.id for n in range(3)]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert conn.execute("UPDATE users SET active=0 WHERE id IN (?, ?)",
                        ids[:2]).rowcount == 2
    line = {"trial_id": None, "task_id": "t", "allocation_id": "a", "agent_id": "x",
            "source": "task", "log": "hello\x00there\n", "timestamp": 1.5}
    assert logs.insert(conn, [line | {"seq": 1}, line | {"seq": 2}]).value == 2
    assert logs.insert(conn, [line | {"seq": 2}, line | {"seq": 3}]).value == 1
    row = conn.execute("SELECT log, timestamp FROM logs ORDER BY id").fetchone()
    assert (row["log"], row[1]) == ("hello\ufffdthere\n", 1.5)
    conn.close()


def test_text_postgresql_cannot_hold_is_refused_not_a_crash(pg_url: str) -> None:
    conn = dbmod.connect(pg_url)
    with pytest.raises(InvalidArgument, match="PostgreSQL cannot store"):
        users.create(conn, "a\x00b", "", admin=False)
    # the connection goes on
    assert users.create(conn, "ab", "", admin=False).value.username == "ab"
    conn.close()


async def test_a_nul_character_is_a_400_on_postgresql(api: Api, backend: str) -> None:
    """Through the API: SQLite keeps a NUL, PostgreSQL refuses it with a 400 that says why
    (never a 500), and the master goes on."""
    await create(api)
    status = 200 if backend == "sqlite" else 400
    body = await api.call("PATCH", "/api/v1/experiments/1", {"description": "a\x00b"},
                          status=status)
    if backend == "postgres":
        assert "PostgreSQL cannot store" in body["message"]
    await api.call("PATCH", "/api/v1/experiments/1", {"description": "ab"})


def test_a_sqlite_url_is_not_mistaken_for_postgresql(tmp_path: Path) -> None:
    assert not pg.is_url(tmp_path / "postgresql:" / "m.db")
    assert isinstance(dbmod.connect(tmp_path / "m.db"), sqlite3.Connection)


def test_without_postgresql_its_leg_skips_naming_the_package(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import pg_cluster

    monkeypatch.setattr(pg_cluster, "bindir", lambda: None)
    why = pg_cluster.missing()
    assert why is not None and "package `postgresql`" in why
