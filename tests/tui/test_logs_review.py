"""The logs screen after a new user's review (issue 33 fix round, W): `o` keeps the match gone
to in view and the title (not a toast that times out) says where it is; a short line prefix
(time, rank) on narrow screens and the full one on wide ones; `w` wraps at word boundaries and
keeps the same line at the top; follow is paused only by `f` and says when the trial ended;
a time range says "reading…" until its page comes. Each at 80x24 and 200x50, with the real
screen and widget on a stand-in client at the API boundary."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dettui.screens.logs import LogsScreen
from tests.poll import until_async
from tests.tui.fixed import FixedClient, FixedDashboard

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
NOW = datetime(2026, 11, 27, 15, 0, tzinfo=UTC)
WORDS = "step {i}: loss 0.5 lr=0.01 momentum=0.9 opt=adam batch=64 " * 4
WORD = re.compile(r"^(step|\d+:|loss|0\.5|lr=0\.01|momentum=0\.9|opt=adam|batch=64|r[01]|"
                  r"2026-11-27|14:00:\d\d(\.250)?|c0ffee12|\[rank=[01]\])$")


def line(i: int, text: str) -> dict[str, Any]:
    return {"id": str(i + 1), "rankId": i % 2, "containerId": "c0ffee1234567",
            "timestamp": f"2026-11-27T14:00:{i % 60:02d}.250000Z", "log": text + "\n",
            "message": f"[2026-11-27T14:00:{i % 60:02d}.250000Z] c0ffee12 [rank={i % 2}] || "
                       f"{text}\n"}


class Lines(FixedClient):
    """A trial's follower: `first` lines at once, then what a test puts in `more` (None ends
    the follow, as the master does when the trial has ended). A page read with a time range
    waits for `page_read`."""

    first: list[dict[str, Any]] = []

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.more: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.page_read = asyncio.Event()

    async def trial_log_page(self, trial_id: int, *, since: float | None = None,
                             **_: Any) -> list[dict[str, Any]]:
        if since is not None:
            await self.page_read.wait()
        return []

    def follow_trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        return self._follow()

    async def _follow(self) -> AsyncIterator[dict[str, Any]]:
        for item in self.first:
            yield item
        while (item := await self.more.get()) is not None:
            yield item


def dashboard(lines: list[dict[str, Any]]) -> tuple[FixedDashboard, list[Lines]]:
    made: list[Lines] = []

    class Client(Lines):
        first = lines

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    return FixedDashboard(client=Client), made


async def opened(app: FixedDashboard, count: int) -> LogsScreen:
    await app.push_screen(LogsScreen(1, now=lambda: NOW))
    screen = app.screen
    assert isinstance(screen, LogsScreen)
    await until_async(lambda: screen.log_widget.line_count == count, "the lines", timeout=15)
    return screen


def rows(screen: LogsScreen) -> list[str]:
    view = screen.log_widget
    return ["".join(s.text for s in view.render_line(y)) for y in range(view.size.height)]


def last_row(screen: LogsScreen) -> str:
    return next((r for r in reversed(rows(screen)) if r.strip()), "")


def title(screen: LogsScreen) -> str:
    return str(screen.query_one("#title").render())


def top_line(screen: LogsScreen) -> int:
    return screen.log_widget._top_index()


@pytest.mark.parametrize("size", SIZES)
async def test_only_matches_keeps_the_match_gone_to_in_view_and_the_title_says_it(
        size: str) -> None:
    app, _ = dashboard([line(i, f"loss {i}" if i % 10 == 0 else f"step {i}")
                        for i in range(200)])
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(app, 200)
        await pilot.press("slash", *"loss", "enter", "n", "n")  # the 3rd match: line 21
        await pilot.pause(0.2)
        assert "match: line 21" in title(screen)
        await pilot.press("o")
        await pilot.pause(0.3)
        assert screen.log_widget.line_count == 20
        assert "match: line 3" in title(screen)  # the 3rd of the 20 shown
        assert any(r.rstrip().endswith("loss 20") for r in rows(screen)), rows(screen)
        assert not [n for n in app._notifications if "loss" in str(n.message)], \
            "a toast (it times out, so a snapshot may or may not have it)"
        await pilot.press("o")  # all lines again: still the same match in view
        await pilot.pause(0.3)
        assert "match: line 21" in title(screen)
        assert any(r.rstrip().endswith("loss 20") for r in rows(screen)), rows(screen)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_the_line_prefix_is_short_on_narrow_screens_and_full_on_wide_ones(
        size: str) -> None:
    app, _ = dashboard([line(i, f"step {i}") for i in range(5)])
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(app, 5)
        await pilot.pause(0.2)
        first = rows(screen)[0]
        if size == "80x24":
            assert first.startswith("  14:00:00 r0 step 0"), first
        else:
            assert first.startswith("  2026-11-27 14:00:00.250 c0ffee12 [rank=0] step 0"), first
        await pilot.press("slash", *"step 3", "enter")  # a match is marked in the text
        await pilot.pause(0.2)
        assert "match: line 4" in title(screen)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_wrap_breaks_at_words_and_keeps_the_line_at_the_top(size: str) -> None:
    app, _ = dashboard([line(i, WORDS.format(i=i).strip()) for i in range(3000)])
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(app, 3000)
        view = screen.log_widget
        await pilot.pause(0.2)
        view.scroll_to(y=1650, animate=False, immediate=True)
        await pilot.press("f")  # (paused: the view stays where it is)
        await pilot.pause(0.1)
        assert top_line(screen) == 1650
        await pilot.press("w")
        await pilot.pause(0.2)
        assert top_line(screen) == 1650, "the view jumped when wrapping"
        for row in rows(screen):
            for word in row[2:].split():
                assert WORD.match(word), f"cut mid-word: {word!r} in {row!r}"
        await pilot.press("w")
        await pilot.pause(0.2)
        assert top_line(screen) == 1650, "the view jumped when unwrapping"
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_follow_is_paused_only_by_f_and_says_when_the_trial_ended(size: str) -> None:
    app, made = dashboard([line(i, f"step {i}") for i in range(100)])
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(app, 100)
        client = made[-1]
        assert "following" in title(screen)
        await pilot.press("f")
        await pilot.pause(0.1)
        assert "paused (f: follow)" in title(screen)
        view = screen.log_widget
        at, top = view.scroll_y, rows(screen)[0]
        for i in range(100, 110):
            client.more.put_nowait(line(i, f"step {i}"))
        await until_async(lambda: "10 new lines" in title(screen), "counted", timeout=10)
        await pilot.pause(0.5)
        assert "paused (f: follow)" in title(screen)
        assert view.scroll_y == at and rows(screen)[0] == top, "the view moved"
        await pilot.press("G")
        await pilot.pause(0.2)
        assert "following" in title(screen) and "step 109" in last_row(screen)
        await pilot.press("f")  # after G, f pauses again
        await pilot.pause(0.1)
        client.more.put_nowait(line(110, "step 110"))
        await until_async(lambda: "1 new line" in title(screen), "counted", timeout=10)
        assert "paused" in title(screen)
        await pilot.press("f")
        await pilot.pause(0.2)
        assert "step 110" in last_row(screen)
        client.more.put_nowait(None)  # the trial ended: the master ends the follow
        await until_async(lambda: "trial ended: all lines read" in title(screen), "said",
                          timeout=10)
        assert "paused" not in title(screen)
    assert app.errors == []


@pytest.mark.parametrize("size", SIZES)
async def test_a_time_range_says_reading_until_its_page_comes(size: str) -> None:
    app, made = dashboard([line(i, f"step {i}") for i in range(5)])
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = await opened(app, 5)
        await pilot.press("t")
        screen.query_one("#search").value = "since 10m"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert "reading…" in title(screen)
        made[-1].page_read.set()
        await until_async(lambda: "reading…" not in title(screen), "read", timeout=10)
        assert "time since 10m" in title(screen)
    assert app.errors == []
