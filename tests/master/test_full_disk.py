"""A full disk under the state dir (issue 29, attack 6): the store's writes fail with SQLite's
own SQLITE_FULL ("database or disk is full"), raised here at the COMMIT of every transaction
that wrote (`Disk`), and by a database capped at its size for the store's transaction helper;
tests/e2e/test_full_disk.py fills a real filesystem.

What held before: nothing. Every write answered 500 "internal error: database or disk is full",
which agents and the Core API treat as final: the trial's metric report raised in the training
loop and the trial ended in ERROR. Now a full disk is a 503 with a Retry-After whose message
names the state dir and its filesystem; new work is refused with it; reads go on; a metric
report, a batch of log lines and an exit report are sent again and stored exactly once when
space returns.

SQLite only: a PostgreSQL server's disk cannot be filled from here (its disk_full SQLSTATE is
mapped the same way: test_the_mapping)."""

from __future__ import annotations

import asyncio
import errno
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from dettui.core import _session, _train
from dettui.core._info import ClusterInfo, TrialInfo
from dettui.core._session import Session
from dettui.errors import StorageFull, Unavailable
from dettui.master.http import appkeys
from dettui.master.store import db as dbmod
from dettui.master.store import tx
from tests.master.conftest import Api, agent_headers, allocate
from tests.master.test_agent_binding import join
from tests.master.test_api import create


@pytest.fixture
def backend() -> str:
    return "sqlite"  # see the module's docstring


def _real_full_error() -> sqlite3.OperationalError:
    """SQLite's own SQLITE_FULL, from a database capped at its size."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (b BLOB)")
    conn.execute(f"PRAGMA max_page_count={conn.execute('PRAGMA page_count').fetchone()[0]}")
    try:
        conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
    except sqlite3.OperationalError as exc:
        assert exc.sqlite_errorcode == dbmod.SQLITE_FULL, exc
        return exc
    finally:
        conn.close()
    raise AssertionError("a capped database took a row")


class Disk:
    """Makes the store's disk full: every transaction that changed something fails at its
    COMMIT with SQLite's SQLITE_FULL, as in WAL mode when the log cannot grow (what the
    attack's master logged), and its transaction is left open, as SQLite may leave it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        error = _real_full_error()
        plain = tx.Connection.execute

        def execute(conn: tx.Connection, sql: str, *args: Any) -> sqlite3.Cursor:
            if self.full and sql == "COMMIT" and conn.total_changes != conn.__dict__.get("at"):
                raise error
            if sql == "BEGIN IMMEDIATE":
                conn.__dict__["at"] = conn.total_changes
            return plain(conn, sql, *args)

        monkeypatch.setattr(tx.Connection, "execute", execute)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def state_dir(api: Api) -> Path:
    return Path(api.client.server.app[appkeys.SETTINGS].state_dir)


async def refused(api: Api, method: str, path: str, body: Any = None,
                  headers: dict[str, str] | None = None) -> str:
    """The request is answered 503 with a Retry-After and the disk's sentence; that sentence."""
    resp = await api.client.request(method, path, json=body,
                                    headers=api.headers() if headers is None else headers)
    text = await resp.text()
    assert resp.status == 503, f"{method} {path}: {resp.status} {text}"
    assert resp.headers.get("Retry-After") == "5"
    message = str((await resp.json())["message"])
    assert "the master's disk is full" in message and str(state_dir(api)) in message, message
    return message


async def test_new_work_is_refused_naming_the_state_dir_and_reads_go_on(api: Api,
                                                                      disk: Disk) -> None:
    await create(api)
    disk.full = True
    message = await refused(api, "POST", "/api/v1/experiments",
                            {"config": "name: x\nentrypoint: python3 train.py\n"
                                       "searcher: {name: single, metric: loss, "
                                       "max_length: {batches: 1}}\n",
                             "modelDefinition": [], "activate": True})
    assert "nothing was stored" in message and "KiB free" in message
    assert len((await api.call("GET", "/api/v1/experiments"))["experiments"]) == 1
    disk.full = False  # the transaction was rolled back whole: the store takes writes again
    await create(api)
    assert len((await api.call("GET", "/api/v1/experiments"))["experiments"]) == 2


async def test_metrics_wait_for_space_and_arrive_once(api: Api, disk: Disk,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The trial's reports (one group commit each, failed whole) are sent again by the Core
    API, which says so in the trial's log, and each is stored once."""
    await create(api)
    alloc, token = await allocate(api, 1, "agent-x", [0])
    url = str(api.client.make_url("")).rstrip("/")
    trial = TrialInfo(trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={},
                      steps_completed=0, trial_run_id=alloc.run_id)
    info = ClusterInfo(master_url=url, cluster_id="", agent_id="agent-x", slot_ids=[0],
                       task_id="", allocation_id=alloc.id, session_token=token,
                       task_type="TRIAL", latest_checkpoint=None, trial=trial)
    train = _train.TrainContext(Session(url, task_token=token), info)
    disk.full = True

    def loop() -> None:
        for step in range(1, 51):
            train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})

    await asyncio.to_thread(loop)
    await asyncio.sleep(1.5)  # the reports wait in the Core API's queue, sent again and again
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    assert rows == []
    disk.full = False
    await asyncio.to_thread(train.close)
    rows = (await api.call("GET", "/api/v1/trials/1/metrics"))["metrics"]
    assert sorted(r["stepsCompleted"] for r in rows) == list(range(1, 51))
    said = capsys.readouterr().err
    assert "dettui: the master cannot take POST /api/v1/trials/1/metrics" in said, said
    assert "the master's disk is full" in said and "dettui: the master took" in said


async def test_log_lines_and_the_exit_report_wait_for_space(api: Api, disk: Disk) -> None:
    """The agent's batch of log lines and its exit report are refused with the typed error
    (agents retry a 503), the trial stays running meanwhile, and both are taken once space
    returns: each line once (sequence numbers), the experiment ended as the exit says."""
    await create(api)
    agent = await agent_headers(api)
    alloc, _ = await allocate(api, 1, "vm-local")
    await join(api, agent, running=[alloc.id])
    lines = {"logs": [{"allocationId": alloc.id, "log": f"line {i}\n", "timestamp": float(i),
                       "seq": i} for i in range(1, 30)]}
    logs_path = "/api/v1/agents/vm-local/logs"
    exit_path = f"/api/v1/agents/vm-local/allocations/{alloc.id}/exit"
    disk.full = True
    await refused(api, "POST", logs_path, lines, agent)
    await refused(api, "POST", exit_path, {"exitCode": 0}, agent)
    assert (await api.call("GET", "/api/v1/trials/1"))["trial"]["state"] == "STATE_RUNNING"
    disk.full = False
    for _ in range(2):  # the agent cannot know the first went in: it sends the batch again
        await api.call("POST", logs_path, lines, headers=agent)
    await api.call("POST", exit_path, {"exitCode": 0}, headers=agent)
    resp = await api.client.get("/api/v1/trials/1/logs", headers=api.headers())
    got = [json.loads(raw)["result"]["log"] for raw in (await resp.text()).splitlines()]
    assert sorted(ln for ln in got if ln.startswith("line ")) == sorted(
        f"line {i}\n" for i in range(1, 30)), got
    trial = (await api.call("GET", "/api/v1/trials/1"))["trial"]
    assert trial["state"] == "STATE_COMPLETED", trial


def test_the_mapping(tmp_path: Path) -> None:
    """Which errors are a full disk: SQLITE_FULL, ENOSPC and EDQUOT, PostgreSQL's disk_full;
    not other I/O errors, nor an I/O error of SQLite while the disk has room."""
    db = tmp_path / "state" / "master.db"
    db.parent.mkdir()
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = dbmod.SQLITE_FULL  # type: ignore[attr-defined]
    ioerr = sqlite3.OperationalError("disk I/O error")
    ioerr.sqlite_errorcode = dbmod.SQLITE_IOERR | (3 << 8)  # type: ignore[attr-defined]
    for exc in (full, OSError(errno.ENOSPC, "No space left on device"),
                OSError(errno.EDQUOT, "Disk quota exceeded")):
        mapped = dbmod.storage_full(exc, db)
        assert isinstance(mapped, StorageFull) and mapped.http_status == 503
        assert str(db.parent) in mapped.message and "is full" in mapped.message
    for exc in (OSError(errno.EIO, "I/O error"), ioerr, ValueError("x"),
                sqlite3.IntegrityError("UNIQUE constraint failed")):
        assert dbmod.storage_full(exc, db) is None, exc

    class DiskFull(Exception):
        sqlstate = "53100"

    url = "postgresql://u@localhost/db"
    mapped = dbmod.storage_full(DiskFull("could not extend file"), url)
    assert mapped is not None and "PostgreSQL server is full" in mapped.message
    assert dbmod.storage_full(OSError(errno.ENOSPC, "local"), url) is None



def test_a_statement_that_finds_the_disk_full_raises_that(tmp_path: Path) -> None:
    """SQLite rolls back by itself on SQLITE_FULL: the transaction's ROLLBACK then failed
    ("cannot rollback - no transaction is active") and hid the error the store maps."""
    conn = dbmod.connect(tmp_path / "master.db")
    conn.execute("CREATE TABLE t (b BLOB)")
    conn.execute(f"PRAGMA max_page_count={conn.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as caught, tx.transaction(conn):
        conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
    assert isinstance(dbmod.storage_full(caught.value, tmp_path / "master.db"), StorageFull)
    assert not conn.in_transaction
    conn.execute(f"PRAGMA max_page_count={1 << 30}")
    with tx.transaction(conn):
        conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
    conn.close()


async def test_the_core_api_waits_a_bounded_time(api: Api, disk: Disk,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_session, "PATIENCE", 1.0)
    await create(api)
    alloc, token = await allocate(api, 1, "agent-x", [0])
    url = str(api.client.make_url("")).rstrip("/")
    session = _session.Session(url, task_token=token)
    disk.full = True
    body = {"group": "training", "metrics": {"trialId": 1, "trialRunId": alloc.run_id,
                                             "stepsCompleted": 1,
                                             "metrics": {"avgMetrics": {"loss": 1.0}}}}
    started = time.monotonic()
    with pytest.raises(Unavailable, match="the master's disk is full"):
        await asyncio.to_thread(session.post, "/api/v1/trials/1/metrics", body)
    assert 0.4 < time.monotonic() - started < 5  # waits that would pass 1 s are not made
    assert "dettui: giving up POST /api/v1/trials/1/metrics after 1 s" in capsys.readouterr().err
