"""A trial's logs, followed live: filter by rank, search, jump to errors. The Log widget only
renders the lines on screen, so 100,000 lines stay fast.

A line is the trial's text: its colour sequences are dropped and every other control character
is shown escaped (`\\x1b`, as `dettui trial logs` prints it: dettui.terminal_text); the Log
widget shows text, never markup. An item is one line on screen (a newline inside shows as
`\\n`), so search positions are items."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import Header, Input, Log

from dettui.errors import MasterUnreachable
from dettui.screens.base import ApiScreen
from dettui.terminal_text import safe_line
from dettui.widgets.keybar import KeyBar
from dettui.widgets.safe import Plain, PlainInput

ERROR = re.compile(r"error|traceback|exception|failed|killed", re.IGNORECASE)
MAX_LINES = 200_000


class LogsScreen(ApiScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match", "Next match"),
        Binding("e", "next_error", "Next error"),
        Binding("R", "next_rank", "Rank filter"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("G", "end", "End"),
        Binding("g", "home", "Top"),
    ]
    DEFAULT_CSS = """
    LogsScreen #title { background: $boost; padding: 0 1; text-style: bold; }
    LogsScreen Log { height: 1fr; }
    LogsScreen #search { display: none; }
    LogsScreen #search.shown { display: block; }
    """

    def __init__(self, trial_id: int) -> None:
        super().__init__()
        self.trial_id = trial_id
        self.lines: list[tuple[int | None, str]] = []  # (rank, text) of everything received
        self.ranks: set[int] = set()
        self.rank: int | None = None  # None: every rank
        self.pattern = ""
        self.position = -1  # the line the last search or error jump went to
        self.follow = True
        self.pending: list[str] = []
        self.last_id = -1  # of the last line read (a stream after an outage goes on from it)
        self.flusher: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain(f"Trial {self.trial_id} logs", id="title")
        yield PlainInput(placeholder="search (regular expression; Enter to find, Escape to "
                         "close)", id="search")
        yield Log(id="log", max_lines=MAX_LINES, auto_scroll=True)
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(Log).focus()
        self.stream_logs()

    @property
    def log_widget(self) -> Log:
        return self.query_one("#log", Log)

    @work(exclusive=True, group="logs")
    async def stream_logs(self) -> None:
        if self.flusher is None:
            self.flusher = self.set_interval(0.1, self._flush)
        try:
            await self._follow()
        except MasterUnreachable:
            return  # the banner says so; `reconnected` follows on from the last line read
        if self.live:
            self._flush()

    def reconnected(self) -> None:
        self.stream_logs()

    async def _follow(self) -> None:
        async for item in self.client.trial_logs(self.trial_id, follow=True):
            self.fed = True
            line_id = _line_id(item)
            if line_id is not None:
                if line_id <= self.last_id:
                    continue  # read before the master went away
                self.last_id = line_id
            rank, text = _line(item)
            self.lines.append((rank, text))
            if rank is not None:
                self.ranks.add(rank)
            if self.rank is None or rank == self.rank:
                self.pending.append(text)

    def _flush(self) -> None:
        """Write what arrived since the last flush in one go (10 times a second)."""
        if self.pending and self.live:
            batch, self.pending = self.pending, []
            self.log_widget.write_lines(batch)
            self._title()

    def _title(self) -> None:
        rank = "all ranks" if self.rank is None else f"rank {self.rank}"
        search = f", search /{self.pattern}/" if self.pattern else ""
        self.show("#title",
            f"Trial {self.trial_id} logs: {len(self.lines)} lines, {rank}{search}"
            f"{'' if self.follow else ', paused'}")

    def _shown(self) -> list[str]:
        return [t for r, t in self.lines if self.rank is None or r == self.rank]

    def _redraw(self) -> None:
        log = self.log_widget
        log.clear()
        self.pending = []
        log.write_lines(self._shown())
        self.position = -1
        self._title()

    def action_next_rank(self) -> None:
        ranks = sorted(self.ranks)
        if not ranks:
            self.notify("these logs carry no rank", severity="warning")
            return
        if self.rank is None:
            self.rank = ranks[0]
        else:
            i = ranks.index(self.rank) if self.rank in ranks else -1
            self.rank = ranks[i + 1] if i + 1 < len(ranks) else None
        self._redraw()

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Submitted, "#search")
    def _search(self, event: Input.Submitted) -> None:
        self.pattern = event.value
        box = self.query_one("#search", Input)
        box.remove_class("shown")
        self.log_widget.focus()
        self.position = -1
        self.action_next_match()

    def _jump(self, regex: re.Pattern[str], what: str) -> None:
        shown = self._shown()
        for i in range(self.position + 1, len(shown)):
            if regex.search(shown[i]):
                self.position = i
                self.follow = False
                self.log_widget.auto_scroll = False
                self.log_widget.scroll_to(y=max(0, i - 3), animate=False)
                self.notify(f"line {i + 1}: {shown[i][:80]}", timeout=3)
                self._title()
                return
        self.notify(f"no more {what}", severity="warning")
        self.position = -1

    def action_next_match(self) -> None:
        if not self.pattern:
            self.action_search()
            return
        try:
            regex = re.compile(self.pattern, re.IGNORECASE)
        except re.error as exc:
            self.notify(f"search: {exc}", severity="error")
            return
        self._jump(regex, f"matches of /{self.pattern}/")

    def action_next_error(self) -> None:
        self._jump(ERROR, "errors")

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.log_widget.auto_scroll = self.follow
        if self.follow:
            self.log_widget.scroll_end(animate=False)
        self._title()

    def action_end(self) -> None:
        self.log_widget.scroll_end(animate=False)

    def action_home(self) -> None:
        self.follow = False
        self.log_widget.auto_scroll = False
        self.log_widget.scroll_home(animate=False)
        self._title()

    def action_back(self) -> None:
        box = self.query_one("#search", Input)
        if box.has_class("shown"):
            box.remove_class("shown")
            self.log_widget.focus()
            return
        self.app.pop_screen()


def _line_id(item: dict[str, Any]) -> int | None:
    try:
        return int(item["id"])
    except (KeyError, TypeError, ValueError):
        return None


def _line(item: dict[str, Any]) -> tuple[int | None, str]:
    rank = item.get("rankId")
    text = safe_line(str(item.get("message") or item.get("log") or "").rstrip("\n"))
    text = text.replace("\n", "\\n")
    return (int(rank) if isinstance(rank, int) else None), text

