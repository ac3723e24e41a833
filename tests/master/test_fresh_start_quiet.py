"""A master restarted on a database this version wrote says nothing about older versions: the
trials it created are not left for the start-up's backfill ("computed the summary metrics of
trials an older version did not keep" was logged on the second start of a fresh install)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dettui.master.app import create_app
from dettui.master.cluster import recovery
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from tests.master.test_recovery import _one_experiment


async def test_a_restart_of_a_fresh_install_backfills_nothing(
        master_settings: MasterSettings, aiohttp_client: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    await _one_experiment(master_settings, aiohttp_client)
    caplog.set_level(logging.INFO)
    second = await aiohttp_client(create_app(master_settings))
    db = second.server.app[appkeys.DB]
    stale = await db.run(lambda c: c.execute(
        "SELECT (SELECT COUNT(*) FROM experiments WHERE best_stale=1) + "
        "(SELECT COUNT(*) FROM trials WHERE summary_stale=1)").fetchone()[0])
    assert stale == 0
    await recovery.backfill(second.server.app[appkeys.CLUSTER].dispatcher)  # as at start
    assert not [r for r in caplog.records if "older version" in r.getMessage()]
