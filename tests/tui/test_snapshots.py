"""Snapshots of every screen and dialog with fixed data (pytest-textual-snapshot), each at
80x24 (columns collapse by priority, the footer fits) and 200x50. The client is a fixed stand-in
at the API boundary (tests/tui/fixed.py); the screens, widgets and stream handling are the real
ones. Update after an intended change with `pytest tests/tui/test_snapshots.py
--snapshot-update`, and look at what changed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from dettui.screens.quit import QuitScreen, StoppingScreen, Work, stopping_text
from tests.tui.fixed import GPU_AGENT, FixedClient, FixedDashboard, MarkedLogs, NoMetrics

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
Steps = Callable[[Pilot[None]], Awaitable[None]]


def keys(*pressed: str, wait: float = 0.3, settle: float = 0.3) -> Steps:
    async def run(pilot: Pilot[None]) -> None:
        await pilot.pause(0.3)
        for key in pressed:
            await pilot.press(key)
            await pilot.pause(wait)
        for box in pilot.app.screen.query(Input):  # a blinking cursor is not a difference
            box.cursor_blink = False
        await pilot.pause(settle)
    return run


async def quit_dialog(pilot: Pilot[None]) -> None:
    await pilot.pause(0.3)
    await pilot.app.push_screen(QuitScreen(Work(3, ("gpu-box",), 1, 2),
                                           "http://127.0.0.1:8080", 4242))
    await pilot.pause(0.3)


async def stopping(pilot: Pilot[None]) -> None:
    await pilot.pause(0.3)
    screen = StoppingScreen()
    await pilot.app.push_screen(screen)
    await pilot.pause(0.2)
    screen.progress(stopping_text(2))
    await pilot.pause(0.3)


SCREENS: dict[str, Steps] = {
    "queue": keys(),
    "experiments": keys("2"),
    "experiment": keys("2", "enter", wait=0.4),
    "logs": keys("2", "enter", "l", wait=0.4),
    "cluster": keys("3"),
    "help": keys("question_mark"),
    "palette": keys("ctrl+p", "k", "i", "l", "l", "down", "up", settle=1.0),
    "confirm_kill": keys("2", "x"),
    "confirm_delete": keys("2", "D"),
    "confirm_cancel": keys("2", "c"),
    "prompt": keys("P"),
    "quit": quit_dialog,
    "stopping": stopping,
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", SCREENS)
def test_screen(snap_compare: Any, screen: str, size: str) -> None:
    assert snap_compare(FixedDashboard(), terminal_size=SIZES[size], run_before=SCREENS[screen])


@pytest.mark.parametrize("size", SIZES)
def test_cluster_with_gpus(snap_compare: Any, size: str) -> None:
    """NVML readings as the master serves them: per GPU utilisation, memory, temperature,
    power and processes, with utilisation history."""
    assert snap_compare(FixedDashboard([GPU_AGENT]), terminal_size=SIZES[size],
                        run_before=keys("3"))


@pytest.mark.parametrize("size", SIZES)
def test_experiment_without_metrics(snap_compare: Any, size: str) -> None:
    """The chart says its trial has reported none yet."""
    assert snap_compare(FixedDashboard(client=NoMetrics), terminal_size=SIZES[size],
                        run_before=keys("2", "enter", wait=0.4))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("pressed", [(), ("T", "enter", "S", "ctrl+u", *"best", "enter"),
                                     ("slash", *"lr>0.01 state:completed", "enter")],
                         ids=["asha", "top5-by-best", "filtered"])
def test_trials_table(snap_compare: Any, size: str, pressed: tuple[str, ...]) -> None:
    """A 16-trial ASHA search: a column per hyperparameter (those that do not fit counted
    under the table), ⇣ on the trials the searcher stopped early, the running trial's CPU,
    RSS and GPU; `T` selects the top 5 (coloured markers), `S best` sorts by the best
    validation_loss; a comparison filter."""
    from tests.tui.fixed import AshaClient

    assert snap_compare(FixedDashboard(client=AshaClient), terminal_size=SIZES[size],
                        run_before=keys("2", "enter", *pressed, wait=0.4))


@pytest.mark.parametrize("size", SIZES)
def test_path_dialog(snap_compare: Any, size: str, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`n` on the experiments list, in a directory with a context: its directories and YAML
    files in the tree (not other files, hidden ones or caches), the config's path typed in."""
    ctx = tmp_path / "sample_ctx"
    for name in ("single.yaml", "search.yml", "train.py", ".hidden.yaml", "notes.txt"):
        (ctx / name).parent.mkdir(exist_ok=True)
        (ctx / name).write_text("")
    for name in ("data", "__pycache__", ".git"):
        (ctx / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert snap_compare(FixedDashboard(), terminal_size=SIZES[size],
                        run_before=keys("2", "n", settle=0.8))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("pressed", [(), ("w",), ("slash", *"loss", "enter", "o")],
                         ids=["marked", "wrapped", "only-matches"])
def test_logs_marked(snap_compare: Any, size: str, pressed: tuple[str, ...]) -> None:
    """Each line's level (E W I D) and stderr (`!`) in the gutter and its text coloured; a
    long line cut (or wrapped with `w`); `o` shows only the lines matching the search."""
    assert snap_compare(FixedDashboard(client=MarkedLogs), terminal_size=SIZES[size],
                        run_before=keys("2", "enter", "l", *pressed, wait=0.4))


class ManyLogs(FixedClient):
    """150,001 lines from the follower (rank i % 2, of the ranks asked for), the last one a
    traceback."""

    def follow_trial_logs(self, trial_id: int, *, ranks: list[int] | None = None,
                          **_: Any) -> AsyncIterator[dict[str, Any]]:
        return self._lines(ranks)

    async def _lines(self, ranks: list[int] | None) -> AsyncIterator[dict[str, Any]]:
        for i in range(150_000):
            if ranks is None or i % 2 in ranks:
                yield {"id": str(i + 1), "rankId": i % 2, "message": f"[rank={i % 2}] line {i}"}
        yield {"id": "150001", "rankId": 0, "message": "[rank=0] Traceback: the very last line"}
        await asyncio.Event().wait()


class ManyLogsDashboard(FixedDashboard):
    async def connect(self) -> Any:
        return ManyLogs()


async def test_logs_screen_holds_its_cap_of_lines_and_finds_the_last_error() -> None:
    from dettui.screens.logs import MAX_HELD, LogsScreen

    app = ManyLogsDashboard()
    async with app.run_test(size=(140, 36)) as pilot:
        await app.push_screen(LogsScreen(1))
        screen = app.screen
        assert isinstance(screen, LogsScreen)

        async def last_line() -> None:
            deadline = asyncio.get_running_loop().time() + 60
            while not (screen.held and screen.held[-1].text.endswith("the very last line")):
                assert asyncio.get_running_loop().time() < deadline
                await pilot.pause(0.1)
            await pilot.pause(0.3)

        await last_line()
        assert len(screen.held) == screen.log_widget.line_count == MAX_HELD
        assert screen.held[0].text.endswith(f"line {150_001 - MAX_HELD}")
        assert f"{150_001 - MAX_HELD:,} dropped (cap {MAX_HELD:,})" in str(
            screen.query_one("#title").render())
        assert any(f"holding at most {MAX_HELD:,} lines" in str(n.message)
                   for n in app._notifications)
        await pilot.press("e")
        await pilot.pause()
        assert screen.position == MAX_HELD - 1
        await pilot.press("R")  # rank 0 only, read again: half the lines plus the last one
        await last_line()
        assert screen.log_widget.line_count == 75_001
        assert {rank for rank, _ in screen.lines} == {0}
    assert app.errors == []
