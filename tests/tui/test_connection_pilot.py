"""The connection banner with fixed data (the real screens; tests/tui/test_connection.py does it
with a real master killed and restarted): a broken stream puts the banner up on every screen
and STALE in the titles, rows kept; when the stream is heard again the banner goes and a
trial's logs go on from the last line read, none twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from dettui.errors import MasterUnreachable
from dettui.screens.connection import Connection, Outage
from dettui.screens.logs import LogsScreen
from dettui.widgets.banner import Banner
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard

SIZE = (120, 36)
DOWN = "No route to host"


class Flaky(FixedClient):
    """Every feed's stream breaks when `down` is set and comes back (a new snapshot) when
    `up` is; the logs end with the master and are read again from the start after it."""

    down = asyncio.Event()
    up = asyncio.Event()
    log_reads = 0

    async def changes(self, topics: list[str], **kw: Any) -> AsyncIterator[dict[str, Any]]:
        lost: Callable[[str], None] = kw["lost"]
        first = super().changes(topics)
        yield await anext(first)
        await self.down.wait()
        lost(f"cannot reach the master at http://fixed: {DOWN}")
        await self.up.wait()
        async for message in super().changes(topics):
            yield message

    async def trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        type(self).log_reads += 1
        lines = 3 if self.log_reads == 1 else 5
        for i in range(1, lines + 1):
            yield {"id": str(i), "rankId": 0, "message": f"line {i}"}
        if self.log_reads == 1:
            await self.down.wait()
            raise MasterUnreachable("cannot reach the master at http://fixed")
        await asyncio.Event().wait()


def banner(app: FixedDashboard) -> str:
    found = app.screen.query(Banner)
    return str(found.first().render()) if found and found.first().has_class("shown") else ""


def title(app: FixedDashboard) -> str:
    return str(app.screen.query_one("#title").render())


async def test_a_broken_stream_is_a_banner_and_the_logs_go_on_after_it() -> None:
    Flaky.down, Flaky.up, Flaky.log_reads = asyncio.Event(), asyncio.Event(), 0
    app = FixedDashboard(client=Flaky)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause(0.3)
        await pilot.press("enter", "enter")  # experiment 1, then trial 1's logs
        await until_async(lambda: isinstance(app.screen, LogsScreen)
                          and "3 lines" in title(app), "trial 1's logs", timeout=15)
        Flaky.down.set()
        await until_async(lambda: banner(app), "the banner", timeout=15)
        assert "master http://fixed unreachable since" in banner(app), banner(app)
        assert banner(app).endswith(f"retrying ({DOWN})"), banner(app)
        assert "STALE" in title(app) and "3 lines" in title(app)
        await pilot.press("escape")  # the experiment screen keeps its trials, marked stale
        await until_async(lambda: "STALE" in title(app), "the experiment's title", timeout=15)
        assert banner(app) and app.screen.table.row_count == 2
        await pilot.press("2")
        await until_async(lambda: "STALE" in title(app) and banner(app), "experiments")
        assert app.screen.table.row_count == 3 and app.screen.has_class("-stale")

        Flaky.up.set()
        await until_async(lambda: not banner(app) and "STALE" not in title(app),
                          "the banner to go", timeout=15)
        assert not app.screen.has_class("-stale")
        await pilot.press("enter", "enter")
        logs = await until_async(lambda: app.screen if isinstance(app.screen, LogsScreen)
                                 and "5 lines" in title(app) else None, "the logs", timeout=15)
    assert [text for _, text in logs.lines] == [f"line {i}" for i in range(1, 6)]


def test_the_connection_is_down_until_every_broken_feed_is_heard_again() -> None:
    seen: list[tuple[Outage | None, bool]] = []
    now = [1000.0]
    link = Connection("http://m", lambda o, back: seen.append((o, back)), now=lambda: now[0])
    a, b = link.open(), link.open()
    link.heard(a)
    assert link.outage is None and seen == []
    link.lost(a, "refused")
    now[0] += 5
    link.lost(b, "refused")
    assert link.outage == Outage("http://m", 1000.0, "refused") and len(seen) == 1
    link.heard(a)
    assert link.outage is not None, "b is still down"
    link.lost(a, "timed out")  # the reason changes, not the time it began
    assert seen[-1] == (Outage("http://m", 1000.0, "timed out"), False)
    link.heard(a)
    link.close(b)  # a feed whose screen went away no longer counts
    assert link.outage is None and seen[-1] == (None, True)
