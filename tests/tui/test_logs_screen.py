"""The logs screen (issue 33, item 3) against a real master in-process, sharing the dashboard's
event loop as the embedded one does: a long log opens at its last page at once and is read a
page at a time; new lines do not move a reader scrolled up; at most MAX_HELD lines are held;
rank and time filters are the master's. Lines cut or wrapped, paged sideways, levels and
stderr marked, and only the matches of a search shown, at 80x24 and 200x50."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Offset
from textual.selection import Selection

from dettui.client import Client
from dettui.commands.dashboard import Dashboard
from dettui.master.app import create_app
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import logs as log_store
from dettui.screens import logs
from dettui.screens.logs import LogsScreen
from tests.master.conftest import Api
from tests.master.test_api import create
from tests.poll import until_async
from tests.tui.fixed import LONG_LINE as LONG
from tests.tui.fixed import MARKED_LINES as SHOWN
from tests.tui.fixed import FixedDashboard, MarkedLogs

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
NOW = 1_790_000_000.0


@pytest.fixture
async def master(tmp_path: Path, aiohttp_client: Any) -> Api:
    """A master with experiment 1's trial 1 (waiting: no agent), its log empty."""
    client = await aiohttp_client(create_app(MasterSettings(state_dir=tmp_path / "state",
                                                            port=0)))
    resp = await client.post("/api/v1/auth/login",
                             data='{"username":"determined","password":""}')
    api = Api(client, (await resp.json())["token"])
    await create(api)
    return api


async def fill(api: Api, start: int, count: int, *, rank: int | None = None,
               stamp: float = NOW) -> None:
    """Lines `line i` for i in start..start+count (rank i % 2 unless given), stored through
    the store in batches."""
    run = api.client.server.app[appkeys.CLUSTER].dispatcher.run
    for at in range(start, start + count, 50_000):
        await run(log_store.insert, [
            {"trial_id": 1, "task_id": "t", "rank_id": i % 2 if rank is None else rank,
             "stdtype": "stdout", "source": "task", "timestamp": stamp + i * 1e-6,
             "log": f"line {i}\n"} for i in range(at, min(at + 50_000, start + count))])


class MasterDashboard(Dashboard):
    """The dashboard on the in-process master, signed in as `determined`."""

    def __init__(self, api: Api) -> None:
        super().__init__(str(api.client.make_url("")).rstrip("/"), Path("/nonexistent"))
        self.api = api

    async def connect(self) -> Any:
        return Client(self.master, self.api.token)


def rows(screen: LogsScreen) -> list[str]:
    view = screen.log_widget
    return ["".join(s.text for s in view.render_line(y)) for y in range(view.size.height)]


def last_row(screen: LogsScreen) -> str:
    return next((r for r in reversed(rows(screen)) if r.strip()), "")


async def open_logs(app: Dashboard) -> LogsScreen:
    await app.push_screen(LogsScreen(1))
    screen = app.screen
    assert isinstance(screen, LogsScreen)
    return screen


@pytest.mark.slow
async def test_a_million_lines_open_at_the_last_page_alone(master: Api) -> None:
    """What makes a long log open at once: only its last page is read (its time is
    bench/logs_open.py's figure, not a timed test)."""
    await fill(master, 0, 1_000_000)
    app = MasterDashboard(master)
    async with app.run_test(size=SIZES["200x50"]) as pilot:
        await pilot.pause(0.3)
        started = time.perf_counter()
        screen = await open_logs(app)
        while "line 999999" not in last_row(screen):
            assert time.perf_counter() - started < 60, rows(screen)  # a hang, not a speed
            await asyncio.sleep(0.005)
        assert len(screen.held) == logs.PAGE
        # Home: the log's first page in place of the last; `G` the last again, following.
        await pilot.press("home")
        await until_async(lambda: "line 0" in rows(screen)[0], "the first line", timeout=10)
        assert "later lines on scroll down" in title(screen)
        await pilot.press("G")
        await until_async(lambda: "line 999999" in last_row(screen), "the last", timeout=10)
    assert app.errors == []


def title(screen: LogsScreen) -> str:
    return str(screen.query_one("#title").render())


@pytest.mark.parametrize("size", SIZES)
async def test_scrolling_up_reads_earlier_pages_and_keeps_the_view(master: Api,
                                                                    size: str) -> None:
    await fill(master, 0, 2500)
    app = MasterDashboard(master)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await open_logs(app)
        await until_async(lambda: "line 2499" in last_row(screen), "the last line", timeout=10)
        assert [t for _, t in screen.lines][0].endswith("line 1500")
        view = screen.log_widget
        view.scroll_to(y=10, animate=False, immediate=True)
        await pilot.pause()
        top = rows(screen)[0]
        await pilot.press("up", "up", "up", "up", "up", "up", "up", "up", "up")
        await until_async(lambda: len(screen.held) == 2000, "a page before", timeout=10)
        await pilot.pause(0.2)
        assert screen.held[0].text.endswith("line 500")
        assert top in rows(screen), "the view moved when the page came"
        view.scroll_home(animate=False, immediate=True)
        await pilot.press("up")
        await until_async(lambda: screen.head_held, "the first page", timeout=10)
        ids = [e.id for e in screen.held]
        assert len(ids) == 2500 and ids == sorted(set(ids)), "a line read twice or skipped"
        assert "earlier lines" not in title(screen)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_new_lines_do_not_move_a_reader_scrolled_up(master: Api, size: str) -> None:
    await fill(master, 0, 300)
    app = MasterDashboard(master)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await open_logs(app)
        await until_async(lambda: "line 299" in last_row(screen), "the last line", timeout=10)
        await pilot.press("pageup")
        await pilot.pause(0.2)
        shown = rows(screen)
        await fill(master, 300, 7)
        await until_async(lambda: "7 new lines (G: follow)" in title(screen), "counted",
                          timeout=10)
        await pilot.pause(0.3)
        assert rows(screen) == shown, "the view jumped"
        await pilot.press("G")
        await until_async(lambda: "line 306" in last_row(screen), "followed", timeout=10)
        assert "new lines" not in title(screen)
        await fill(master, 307, 2)  # following again: new lines come into view
        await until_async(lambda: "line 308" in last_row(screen), "followed", timeout=10)
        assert "new lines" not in title(screen)
        await pilot.press("pageup")  # and once more with End
        await fill(master, 309, 1)
        await until_async(lambda: "1 new line (G: follow)" in title(screen), "counted", timeout=10)
        assert "line 309" not in last_row(screen)
        await pilot.press("end")
        await until_async(lambda: "line 309" in last_row(screen), "followed", timeout=10)
        assert "new lines" not in title(screen)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_at_most_max_held_lines_are_held(master: Api, size: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "MAX_HELD", 2500)
    await fill(master, 0, 5000)
    app = MasterDashboard(master)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await open_logs(app)
        await until_async(lambda: "line 4999" in last_row(screen), "the last line", timeout=10)
        view = screen.log_widget
        for held in (2000, 2500):
            view.scroll_home(animate=False, immediate=True)
            await pilot.press("up")
            await until_async(lambda h=held: len(screen.held) == h, f"{held} held", timeout=10)
        assert screen.held[-1].text.endswith("line 4499"), "the newest 500 are dropped"
        assert "500 dropped (cap 2,500)" in title(screen)
        assert "later lines on scroll down" in title(screen)
        assert any("holding at most 2,500 lines" in str(n.message) for n in app._notifications)
        await fill(master, 5000, 3)  # not held: counted
        await until_async(lambda: "3 new lines" in title(screen), "counted", timeout=10)
        view.scroll_end(animate=False, immediate=True)  # the dropped ones are read again
        await until_async(lambda: screen.held[-1].text.endswith("line 5002"), "read again",
                          timeout=10)
        assert len(screen.held) <= 2500
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_rank_and_time_filters_are_the_masters(master: Api, size: str) -> None:
    await fill(master, 0, 40, stamp=time.time() - 7200)  # two hours ago
    await fill(master, 40, 10, rank=1, stamp=time.time())
    app = MasterDashboard(master)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await open_logs(app)
        await until_async(lambda: len(screen.held) == 50, "every line", timeout=10)
        await pilot.press("R")
        await until_async(lambda: "rank 0" in title(screen) and len(screen.held) == 20,
                          "rank 0's lines", timeout=10)
        assert {rank for rank, _ in screen.lines} == {0}
        await pilot.press("R")  # rank 1
        await until_async(lambda: len(screen.held) == 30, "rank 1's lines", timeout=10)
        await pilot.press("R", "t")  # all ranks, then a time range
        screen.query_one("#search").value = "since 30m"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(lambda: len(screen.held) == 10, "the last 30 minutes", timeout=10)
        assert "time since 30m" in title(screen)
        assert [t[-7:] for _, t in screen.lines] == [f"line {i}" for i in range(40, 50)]
        await pilot.press("t")
        screen.query_one("#search").value = "yesterday"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(lambda: any("not a time range" in str(n.message)
                                      for n in app._notifications), "said so", timeout=10)
        assert len(screen.held) == 10
        await pilot.press("t")
        screen.query_one("#search").value = ""  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(lambda: len(screen.held) == 50, "every line again", timeout=10)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_wrap_page_sideways_marks_and_only_matches(size: str) -> None:
    app = FixedDashboard(client=MarkedLogs)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await open_logs(app)
        await until_async(lambda: screen.log_widget.line_count == 6, "the lines", timeout=10)
        await pilot.pause(0.2)
        view = screen.log_widget
        text = view.text_width
        shown = rows(screen)
        assert [r[:2] for r in shown[:6]] == ["  ", "I ", "W!", "E!", "D ", "E!"]
        assert shown[1][2:].startswith("loss 0.5 [bold]not markup[/]")
        assert shown[0][2:] == LONG[:text] and "END" not in shown[0]
        await pilot.press("greater_than_sign")  # a page sideways: the gutter stays
        await pilot.pause(0.2)
        step = round(view.scroll_x)
        assert step == min(text - 4, view.max_scroll_x) > 0
        assert rows(screen)[0] == "  " + LONG[step:step + text].ljust(text)
        await pilot.press("shift+left")
        await pilot.pause(0.2)
        assert view.scroll_x == 0
        await pilot.press("w")
        await pilot.pause(0.2)
        wrapped = -(-len(LONG) // text)
        shown = rows(screen)
        assert "".join(r[2:] for r in shown[:wrapped]).rstrip() == LONG
        assert shown[wrapped][:2] == "I " and "wrapped" in title(screen)
        await pilot.press("w", "slash")
        screen.query_one("#search").value = "loss"  # type: ignore[attr-defined]
        await pilot.press("enter", "o")
        await pilot.pause(0.2)
        assert screen.log_widget.lines == [SHOWN[1]["log"], SHOWN[4]["log"]]
        assert "2 of 6 lines" in title(screen) and "only /loss/" in title(screen)
        await pilot.press("o")
        await pilot.pause(0.2)
        assert screen.log_widget.line_count == 6
        await pilot.press("e")  # errors: a line marked E (glog's `E1127`), then a traceback
        assert screen.position == 3
        await pilot.press("e")
        assert screen.position == 5
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_lines_are_selected_with_the_mouse(size: str) -> None:
    """A cell on screen maps to its line and character (the gutter to none), so a mouse
    selection copies the log's text, cut or wrapped, and is drawn selected."""
    app = FixedDashboard(client=MarkedLogs)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await open_logs(app)
        await until_async(lambda: screen.log_widget.line_count == 6, "the lines", timeout=10)
        await pilot.pause(0.2)
        view = screen.log_widget
        at = view.content_region.offset

        def char_at(x: int, y: int) -> Offset | None:
            widget, offset = screen._compositor.get_widget_and_offset_at(at.x + x, at.y + y)
            assert widget is view
            return offset

        assert char_at(2 + 5, 1) == Offset(5, 1)  # "loss 0.5": the "0"
        await pilot.press("greater_than_sign")
        await pilot.pause(0.2)
        assert char_at(2, 0) == Offset(round(view.scroll_x), 0)
        await pilot.press("less_than_sign", "w")
        await pilot.pause(0.2)
        assert char_at(2 + 3, 1) == Offset(view.text_width + 3, 0)  # the long line's 2nd row
        wrapped = -(-len(LONG) // view.text_width)  # the row of line 2, "loss 0.5 ..."

        def style_of(text: str) -> Any:
            return next(seg.style for seg in view.render_line(wrapped) if text in seg.text)

        plain = style_of("loss")
        screen.selections = {view: Selection(Offset(0, 1), Offset(8, 2))}
        await pilot.pause(0.2)
        assert screen.get_selected_text() == "loss 0.5 [bold]not markup[/]\n2026-11-"
        selected = screen.get_component_rich_style("screen--selection")
        assert style_of("loss") != plain and style_of("loss").bgcolor == (
            plain + selected).bgcolor
    assert app.errors == []
