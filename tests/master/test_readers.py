"""The store's reader connections (`Database.read`, SQLite): a list or a page never waits behind
the store thread, sees what was committed, reads in one snapshot and cannot write."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from dettui.master.store import db as dbmod


def _count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM cluster WHERE value='v'").fetchone()[0])


def _put(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("INSERT INTO cluster (key, value) VALUES (?, 'v')", (key,))


@pytest.fixture
def database(tmp_path: Path) -> object:
    db = dbmod.Database(tmp_path / "m.db")
    yield db
    db.close()


async def test_a_read_does_not_wait_behind_the_store_thread(database: dbmod.Database) -> None:
    """While the store thread is held (a long write), reads are answered; they see every
    change committed before they began."""
    await database.run(_put, "a")
    held, release = threading.Event(), threading.Event()

    def long_write(conn: sqlite3.Connection) -> None:
        held.set()
        release.wait(10)
        _put(conn, "b")

    writing = asyncio.ensure_future(database.run(long_write))
    await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
    try:
        counts = await asyncio.wait_for(
            asyncio.gather(*(database.read(_count) for _ in range(10))), 5)
        assert counts == [1] * 10
    finally:
        release.set()
        await writing
    assert await database.read(_count) == 2


async def test_a_read_is_one_snapshot(database: dbmod.Database) -> None:
    """A write committed between two statements of one read is not seen by the second."""
    await database.run(_put, "a")
    wrote = threading.Event()
    loop = asyncio.get_running_loop()

    def two_counts(conn: sqlite3.Connection) -> tuple[int, int]:
        first = _count(conn)
        asyncio.run_coroutine_threadsafe(database.run(_put, "b"), loop).add_done_callback(
            lambda _: wrote.set())
        assert wrote.wait(10)
        return first, _count(conn)

    assert await database.read(two_counts) == (1, 1)
    assert await database.read(_count) == 2


async def test_a_read_cannot_write(database: dbmod.Database) -> None:
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await database.read(_put, "x")
    assert await database.read(_count) == 0
    await database.run(_put, "y")  # the store connection writes as before
    assert await database.read(_count) == 1


async def test_readers_are_released_after_an_error(database: dbmod.Database) -> None:
    """A read that fails gives its connection back: as many failures as readers and more,
    and reads still run."""
    def boom(conn: sqlite3.Connection) -> None:
        conn.execute("SELECT 1")
        raise ValueError("boom")

    for _ in range(dbmod.READERS * 3):
        with pytest.raises(ValueError):
            await database.read(boom)
    assert await asyncio.wait_for(database.read(_count), 5) == 0
    assert database._idle.qsize() == len(database.readers) == dbmod.READERS


async def test_a_page_does_not_wait_behind_a_feed_read(database: dbmod.Database) -> None:
    """The stream's feeds read on a reader of their own: while one of their reads is held, a
    page (any other read) is answered, and the feed's read ends as it would have."""
    held, release = threading.Event(), threading.Event()

    def long_feed_read(conn: sqlite3.Connection) -> str:
        conn.execute("SELECT 1")
        held.set()
        release.wait(10)
        return threading.current_thread().name

    async def feed() -> str:
        dbmod.READ_LANE.set(dbmod.FEEDS)  # as a stream feed's task does
        return await database.read(long_feed_read)

    feeding = asyncio.ensure_future(feed())
    await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
    try:
        await database.run(_put, "a")
        counts = await asyncio.wait_for(
            asyncio.gather(*(database.read(_count) for _ in range(5))), 5)
        assert counts == [1] * 5
    finally:
        release.set()
    assert (await feeding).startswith("dettui-feeds")
    assert database._idle.qsize() == len(database.readers) == dbmod.READERS


async def test_a_feeds_read_of_a_few_objects_does_not_wait_behind_a_whole_read(
        database: dbmod.Database) -> None:
    """A feed's re-read of the objects a change named (lane FEW) is answered while the feeds'
    reader and the pages' reader are each held by a long read, and sees what was committed."""
    held = [threading.Event(), threading.Event()]
    release = threading.Event()

    def long_read(conn: sqlite3.Connection, i: int) -> str:
        conn.execute("SELECT 1")
        held[i].set()
        release.wait(10)
        return threading.current_thread().name

    async def feed() -> str:
        dbmod.READ_LANE.set(dbmod.FEEDS)
        return await database.read(long_read, 0)

    async def few() -> tuple[int, str]:
        dbmod.READ_LANE.set(dbmod.FEEDS)
        with dbmod.lane(dbmod.FEW):
            count = await database.read(_count)
            name = await database.read(lambda conn: threading.current_thread().name)
        assert dbmod.READ_LANE.get() == dbmod.FEEDS  # `lane` gave the feed's lane back
        return count, name

    feeding = asyncio.ensure_future(feed())
    paging = asyncio.ensure_future(database.read(long_read, 1))
    for event in held:
        await asyncio.get_running_loop().run_in_executor(None, event.wait, 10)
    try:
        await database.run(_put, "a")
        count, name = await asyncio.wait_for(few(), 5)
        assert count == 1
    finally:
        release.set()
    assert name.startswith("dettui-few")
    assert (await feeding).startswith("dettui-feeds")
    assert (await paging).startswith("dettui-reader")
