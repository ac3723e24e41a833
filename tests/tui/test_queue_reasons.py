"""Why each job waits, in the dashboard's queue (issue 33, item 5): a column where the screen is
wide, and the selected job's line under the table at any width (80x24 too). The master's
`waitReason` through a fixed client at the API boundary; the screen and table are real."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual.widgets import Static

from dettui.widgets.rowtable import RowTable
from tests.tui.fixed import FixedClient, FixedDashboard, job
from tests.tui.test_snapshots import SIZES, keys

BEHIND = "behind job 00000004 (priority 10) of higher priority"
FULL = "pool default full: 2 of 2 slots in use"
HOSTILE = "[bold red]not markup[/] \x1b[31m"


def waiting_jobs(reason_2: str = BEHIND) -> list[dict[str, Any]]:
    jobs = [job(1, "STATE_SCHEDULED", "1/1"), job(2, "STATE_QUEUED", "0/2"),
            job(3, "STATE_QUEUED", "0/1"), job(4, "STATE_QUEUED", "0/2")]
    for j, reason in zip(jobs, (None, reason_2, "paused", FULL), strict=True):
        j["waitReason"] = reason
    return jobs


class Waiting(FixedClient):
    reason_2 = BEHIND

    async def changes(self, topics: list[str], **_: Any) -> AsyncIterator[dict[str, Any]]:
        for topic in topics:
            if topic.partition("?")[0] != "jobs":
                continue
            objs = waiting_jobs(self.reason_2)
            yield {"topic": topic, "kind": "snapshot", "upsert": objs, "remove": [],
                   "order": [o["jobId"] for o in objs], "total": len(objs)}
        await asyncio.Event().wait()


class Hostile(Waiting):
    reason_2 = HOSTILE


@pytest.mark.parametrize("size", SIZES)
def test_queue_says_why_jobs_wait(snap_compare: Any, size: str) -> None:
    """The second job selected: its reason under the table (and in the column at 200x50)."""
    assert snap_compare(FixedDashboard(client=Waiting), terminal_size=SIZES[size],
                        run_before=keys("down"))


def _why(app: FixedDashboard) -> str:
    return str(app.screen.query_one("#why", Static).render())


@pytest.mark.parametrize("size", SIZES)
async def test_the_selected_jobs_line_follows_the_cursor(size: str) -> None:
    app = FixedDashboard(client=Waiting)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.pause(0.3)
        table = app.screen.query_one(RowTable)
        assert ("why" in table.shown_columns) == (size == "200x50")
        assert _why(app) == ""  # the running job does not wait
        await pilot.press("down")
        await pilot.pause()
        assert _why(app) == f"Job 00000002 waits: {BEHIND}"
        await pilot.press("down")
        await pilot.pause()
        assert _why(app) == "Job 00000003 waits: paused"
        await pilot.press("down")
        await pilot.pause()
        assert _why(app) == f"Job 00000004 waits: {FULL}"
        if size == "200x50":
            assert FULL in table.render_line(4).text
    assert app.errors == []


async def test_a_reason_is_shown_as_text_never_markup() -> None:
    app = FixedDashboard(client=Hostile)
    async with app.run_test(size=SIZES["200x50"]) as pilot:
        await pilot.pause(0.3)
        await pilot.press("down")
        await pilot.pause()
        assert _why(app) == "Job 00000002 waits: [bold red]not markup[/] "
    assert app.errors == []


NEVER = ("can never start here: needs 4 slots on one agent or on whole agents; the largest "
         "agent in pool default has 3, and 4 is not a multiple of 3")


class NeverFits(Waiting):
    reason_2 = NEVER


class Endless(Waiting):
    reason_2 = "slots disabled: " + ", ".join(f"agent vm-{i:03d}" for i in range(40))


def _why_rows(app: FixedDashboard) -> list[str]:
    """The #why line's rows as the screen draws them."""
    why = app.screen.query_one("#why", Static)
    return [strip.text.rstrip() for strip in why.render_lines(why.region.reset_offset)]


@pytest.mark.parametrize("size", SIZES)
def test_a_long_reason_wraps_under_the_table(snap_compare: Any, size: str) -> None:
    """At 80x24 the column is left out: the selected job's reason wraps to 3 lines, whole."""
    assert snap_compare(FixedDashboard(client=NeverFits), terminal_size=SIZES[size],
                        run_before=keys("down"))


@pytest.mark.parametrize("size", SIZES)
async def test_the_whole_reason_is_read_at_any_width(size: str) -> None:
    app = FixedDashboard(client=NeverFits)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.pause(0.3)
        await pilot.press("down")
        await pilot.pause()
        rows = _why_rows(app)
        width = SIZES[size][0] - 2
        assert len(rows) == (3 if size == "80x24" else 1), rows
        assert all(len(r) <= width + 1 for r in rows)
        words = " ".join(r.strip() for r in rows).split()
        assert words == f"Job 00000002 waits: {NEVER}".split()  # at word boundaries, all
        table = app.screen.query_one(RowTable)
        assert table.region.bottom == app.screen.query_one("#why", Static).region.y
        await pilot.press("down")  # a short reason takes one line again, the table the rest
        await pilot.pause()
        assert _why_rows(app) == [" Job 00000003 waits: paused"]
        assert table.region.bottom == app.screen.query_one("#why", Static).region.y
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_a_reason_longer_than_its_room_is_cut_with_an_ellipsis(size: str) -> None:
    """A reason past WHY_CAP characters, or past 3 lines, ends in "…": never cut silently."""
    app = FixedDashboard(client=Endless)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.pause(0.3)
        await pilot.press("down")
        await pilot.pause()
        rows = _why_rows(app)
        assert len(rows) == (3 if size == "80x24" else 2), rows
        assert rows[-1].endswith("…"), rows
        assert rows[0].startswith(" Job 00000002 waits: slots disabled: agent vm-000,")
    assert app.errors == []


async def test_the_reason_wraps_again_when_the_terminal_is_resized() -> None:
    """From 200 columns (2 lines) to 80 (4 lines' worth): cut to 3 lines with "…" again."""
    app = FixedDashboard(client=Endless)
    async with app.run_test(size=SIZES["200x50"]) as pilot:
        await pilot.pause(0.3)
        await pilot.press("down")
        await pilot.pause()
        assert len(_why_rows(app)) == 2
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        rows = _why_rows(app)
        assert len(rows) == 3 and rows[-1].endswith("…"), rows
    assert app.errors == []
