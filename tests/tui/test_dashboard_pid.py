"""The dashboard's header names its state dir's master by pid (`URL (pid N) as USER`); when that
master is killed and another starts on the same state dir and port, the header names the new
pid once the dashboard is back in touch (review of issue 31, N9)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from dettui import statedir
from dettui.commands.dashboard import Dashboard
from tests.conftest import Served
from tests.poll import until_async

pytestmark = pytest.mark.slow


async def test_the_header_names_the_pid_of_a_restarted_master(
        headless: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(headless.config_dir))
    for name in ("DET_USER", "DET_PASS", "DET_MASTER"):
        monkeypatch.delenv(name, raising=False)
    local = statedir.holder(headless.state_dir)
    assert local is not None
    app = Dashboard(local.url, headless.state_dir, local=local)
    async with app.run_test(size=(160, 50)):
        await until_async(lambda: app.sub_title, "the header",
                          done=lambda t: t == f"{local.url} (pid {local.pid}) as determined")
        headless.kill9()
        await until_async(lambda: app.connection.outage, "the dashboard to notice",
                          timeout=30)
        port = urlsplit(headless.url).port
        assert port is not None
        headless.start(port=port)
        again = statedir.holder(headless.state_dir)
        assert again is not None and again.pid != local.pid
        await until_async(lambda: app.sub_title, "the header to name the new pid", timeout=60,
                          done=lambda t: t == f"{local.url} (pid {again.pid}) as determined")
