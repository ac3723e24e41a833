"""A trial's logs, read a page at a time: the last page shows at once and the master follows
on from it; scrolling up (or `g`) reads earlier pages, scrolling down later ones. At most
MAX_HELD lines are held: past that the far end is dropped (the title says so) and read again
when scrolled back to. The master filters by rank (`R`) and time range (`t`); a search (`/`)
highlights, and `o` shows only the lines that match it. New lines never move a reader who has
scrolled up: the title counts them, and `G`/End follows again.

A line is the trial's text: its colour sequences are dropped and every other control character
is shown escaped (`\\x1b`, as `dettui trial logs` prints it: dettui.terminal_text); the view
shows text, never markup. Its gutter has the level (E, W, I, D: from the shipper or read from
the text) and `!` for stderr. An item is one line (a newline inside shows as `\\n`)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import Header, Input

from dettui.errors import DettuiError, MasterUnreachable
from dettui.log_entry import LogEntry, entry_of, time_range
from dettui.screens.base import ApiScreen
from dettui.widgets.keybar import KeyBar
from dettui.widgets.log_view import LogView
from dettui.widgets.safe import Plain, PlainInput

ERROR = re.compile(r"error|traceback|exception|failed|killed", re.IGNORECASE)
PAGE = 1000  # lines asked for at once
MAX_HELD = 100_000  # lines held at most; past it the far end is dropped
HINTS = {"search": "search (regular expression; Enter to find, Escape to close)",
         "time": "time range: since 10m | 2h | 14:00-14:30 | 14:00- | "
                 "2026-11-22 14:00 - 2026-11-22 15:00 (empty: all)"}


class LogsScreen(ApiScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("slash", "search", "Search"),
        Binding("o", "only_matches", "Only matches"),
        Binding("w", "toggle_wrap", "Wrap"),
        Binding("t", "time_range", "Time range"),
        Binding("R", "next_rank", "Rank filter"),
        Binding("n", "next_match", "Next match"),
        Binding("e", "next_error", "Next error"),
        Binding("less_than_sign,shift+left", "page_left", "Page left"),
        Binding("greater_than_sign,shift+right", "page_right", "Page right"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("G,end", "end", "End, following"),
        Binding("g,home", "home", "Top"),
    ]
    DEFAULT_CSS = """
    LogsScreen #title { background: $boost; padding: 0 1; text-style: bold; }
    LogsScreen LogView { height: 1fr; }
    LogsScreen #search { display: none; }
    LogsScreen #search.shown { display: block; }
    """

    def __init__(self, trial_id: int, *, now: Any = None) -> None:
        super().__init__()
        self.trial_id = trial_id
        self.now = now or (lambda: datetime.now().astimezone())
        self.held: list[LogEntry] = []  # a contiguous run of the (rank/time filtered) log
        self.ranks: set[int] = set()
        self.rank: int | None = None  # None: every rank
        self.since: float | None = None
        self.until: float | None = None
        self.range_text = ""
        self.pattern = ""
        self.only = False  # show only the lines that match `pattern`
        self.position = -1  # the shown line the last search or error jump went to
        self.follow = True  # new lines scroll into view (while the view is at the end)
        self.paused = False  # `f` paused following: only `f`, `G` or End follow again
        self.ended = False  # the follower read the last line: the trial's log is complete
        self.reading = False  # a page for a new filter is being read (the view is empty)
        self.at = ""  # what the last jump went to ("match", "error"): the title says where
        self.new_lines = 0  # arrived while the reader was elsewhere
        self.head_held = False  # the log's first line is held
        self.tail_held = True  # its newest line is held (the follower's lines are added)
        self.dropped = 0  # lines dropped to stay within MAX_HELD
        self.pending: deque[LogEntry] = deque(maxlen=MAX_HELD)  # read, not yet shown
        self.last_id = 0  # of the newest line the follower read
        self.asking = ""  # what the input box asks for: "search" or "time"
        self.flusher: Timer | None = None
        self.paging = False
        self.generation = 0  # how many times the log was read afresh (a filter changed)
        self.said_dropped = -1  # the generation whose dropped lines were said

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain(f"Trial {self.trial_id} logs", id="title")
        yield PlainInput(placeholder=HINTS["search"], id="search")
        yield LogView(id="log")
        yield KeyBar()

    def on_mount(self) -> None:
        self.log_widget.focus()
        self.flusher = self.set_interval(0.1, self._flush)
        self.open_tail()

    @property
    def log_widget(self) -> LogView:
        return self.query_one("#log", LogView)

    @property
    def lines(self) -> list[tuple[int | None, str]]:
        """(rank, text) of each line held."""
        return [(e.rank, e.text) for e in self.held]

    def _filters(self) -> dict[str, Any]:
        return {"ranks": None if self.rank is None else [self.rank], "since": self.since,
                "until": self.until}

    # reading: the tail, then the follower; pages before and after what is held

    @work(exclusive=True, group="logs")
    async def open_tail(self) -> None:
        """Read the log's last page and follow on from it (again, after a filter changed)."""
        self.generation += 1
        self.held, self.new_lines, self.dropped = [], 0, 0
        self.pending = deque(maxlen=MAX_HELD)
        self.head_held, self.tail_held, self.follow = False, True, True
        self.paused, self.ended, self.at, self.position = False, False, "", -1
        self.log_widget.replace([])
        self.reading = True
        self._title()
        try:
            page = [self._entry(i) for i in await self.client.trial_log_page(
                self.trial_id, limit=PAGE, **self._filters())]
        except MasterUnreachable:
            return  # the banner says so; `reconnected` reads it again
        except DettuiError as exc:
            self.notify(f"logs not read: {exc}", severity="error")
            return
        finally:
            self.reading = False
        self.fed = True
        self.head_held = len(page) < PAGE
        self.last_id = max((e.id for e in page if e.id is not None), default=0)
        self._add(page, at_end=True)
        self.log_widget.scroll_end(animate=False, immediate=True)
        await self._follow()

    def reconnected(self) -> None:
        if self.fed:
            self.follow_on()
        else:
            self.open_tail()

    @work(exclusive=True, group="logs")
    async def follow_on(self) -> None:
        await self._follow()

    async def _follow(self) -> None:
        try:
            async for item in self.client.follow_trial_logs(self.trial_id, after=self.last_id,
                                                           **self._filters()):
                self.fed = True
                entry = self._entry(item)
                if entry.id is not None:
                    if entry.id <= self.last_id:
                        continue  # read before the master went away
                    self.last_id = entry.id
                if self.tail_held:
                    if len(self.pending) == self.pending.maxlen:  # not flushed in time
                        self.head_held, self.dropped = False, self.dropped + 1
                        self._say_dropped(oldest=True)
                    self.pending.append(entry)
                else:
                    self.new_lines += 1
        except MasterUnreachable:
            return  # the banner says so; `reconnected` follows on from the last line read
        except DettuiError as exc:
            self.notify(f"logs not followed: {exc}", severity="error")
            return
        self.ended = True  # the master ends a follow when the trial has ended
        if self.live:
            self._flush()

    def _entry(self, item: dict[str, Any]) -> LogEntry:
        return entry_of(item, self.now().tzinfo)

    def _flush(self) -> None:
        """Add what the follower read since the last flush in one go (10 times a second)."""
        if not self.live:
            return
        if not self.tail_held:  # the reader went to the log's start meanwhile
            self.new_lines += len(self.pending)
            self.pending.clear()
        newest = self.held[-1].id if self.held else None
        if newest is not None:  # lines a page after the held ones has read already
            while self.pending and (self.pending[0].id or newest + 1) <= newest:
                self.pending.popleft()
        if self.pending:
            batch = list(self.pending)
            self.pending.clear()
            view = self.log_widget
            if not (self.follow and view.at_end):
                self.new_lines += len(self._shown(batch))
            self._add(batch, at_end=True)
            if self.follow and not self.new_lines:
                view.scroll_end(animate=False, immediate=True, x_axis=False)
        self._title()

    @work(group="page")
    async def read_page(self, earlier: bool) -> None:
        """The page before the first line held (or after the last), when the reader nears
        it (one read at a time)."""
        if self.paging or not self.held or None in (self.held[0].id, self.held[-1].id):
            return
        self.paging = True
        ends, generation = (self.held[0].id, self.held[-1].id), self.generation
        try:
            if earlier:
                items = await self.client.trial_log_page(self.trial_id, limit=PAGE,
                                                         before=ends[0], **self._filters())
            else:
                items = await self.client.trial_log_page(self.trial_id, limit=PAGE,
                                                         after=ends[1], **self._filters())
        except DettuiError as exc:
            if not isinstance(exc, MasterUnreachable):  # (that one: the banner says so)
                self.notify(f"page not read: {exc}", severity="error")
            return
        finally:
            self.paging = False
        if not self.live or generation != self.generation or not self.held or (
                self.held[0].id, self.held[-1].id) != ends:
            return  # the log was read again meanwhile, or the follower added lines
        page = [self._entry(i) for i in items]
        if earlier:
            self.head_held = len(page) < PAGE
        elif len(page) < PAGE:
            self.tail_held, self.new_lines = True, 0
        self._add(page, at_end=not earlier)
        self._title()

    def _add(self, page: Sequence[LogEntry], *, at_end: bool) -> None:
        """Hold `page` at one end and drop from the other what is past MAX_HELD."""
        for e in page:
            if e.rank is not None:
                self.ranks.add(e.rank)
        view = self.log_widget
        over = len(self.held) + len(page) - MAX_HELD
        if at_end:
            self.held.extend(page)
            view.extend(self._shown(page), follow=self.follow)
            if over > 0:
                self._drop(over, front=True)
        else:
            self.held[:0] = page
            view.prepend(self._shown(page))
            if over > 0:
                self._drop(over, front=False)

    def _drop(self, count: int, *, front: bool) -> None:
        gone = self.held[:count] if front else self.held[-count:]
        shown = len(self._shown(gone))
        if front:
            del self.held[:count]
            self.head_held = False
            self.log_widget.drop_front(shown)
        else:
            del self.held[-count:]
            self.tail_held = False
            self.log_widget.drop_back(shown)
        self._say_dropped(oldest=front)
        self.dropped += count

    def _say_dropped(self, *, oldest: bool) -> None:
        """Say once per reading (per filter) that lines are dropped past the cap."""
        if self.said_dropped != self.generation:
            self.said_dropped = self.generation
            self.notify(f"holding at most {MAX_HELD:,} lines: the "
                        f"{'oldest' if oldest else 'newest'} are dropped and read again when "
                        f"scrolled back to", timeout=4)

    @on(LogView.NearEdge)
    def _near_edge(self, event: LogView.NearEdge) -> None:
        if event.top and not self.head_held:
            self.read_page(True)
        elif not event.top and not self.tail_held:
            self.read_page(False)
        elif not event.top and self.log_widget.at_end and not self.paused:
            self.follow, self.new_lines = True, 0  # scrolled back to the end: follow
            self._title()

    @on(LogView.Jumped)
    def _jumped(self, event: LogView.Jumped) -> None:
        if event.top:
            self.action_home()
        else:
            self.action_end()

    # what is shown

    def _regex(self) -> re.Pattern[str] | None:
        try:
            return re.compile(self.pattern, re.IGNORECASE) if self.pattern else None
        except re.error as exc:
            self.notify(f"search: {exc}", severity="error")
            return None

    def _shown(self, entries: Sequence[LogEntry]) -> list[LogEntry]:
        regex = self._regex() if self.only else None
        if regex is None:
            return list(entries)
        return [e for e in entries if regex.search(e.text)]

    def _redraw(self) -> None:
        """Show the held lines again (all, or the matches): the line a jump went to stays
        in view; else the view follows the end, or shows the first lines when not following."""
        view = self.log_widget
        current = view.entries[self.position] if 0 <= self.position < view.line_count else None
        shown = self._shown(self.held)
        view.replace(shown)
        view.highlight(self._regex())
        index = next((i for i, e in enumerate(shown) if e is current), -1)
        self.position = index
        if index >= 0:
            view.go_to(index)
        elif self.follow:
            self.at = ""
            view.scroll_end(animate=False, immediate=True)
        else:
            self.at = ""
            view.scroll_home(animate=False, immediate=True)
        self._title()

    def _title(self) -> None:
        if not self.is_mounted:
            return
        shown = self.log_widget.line_count
        count = (f"{shown:,} of {_lines(len(self.held))}" if shown != len(self.held)
                 else _lines(shown))
        parts = [f"Trial {self.trial_id} logs: {count}",
                 "all ranks" if self.rank is None else f"rank {self.rank}"]
        if self.range_text:
            parts.append(f"time {self.range_text}")
        if self.pattern:
            parts.append(f"{'only' if self.only else 'search'} /{self.pattern}/")
        if self.at and self.log_widget.current >= 0:
            parts.append(f"{self.at}: line {self.log_widget.current + 1:,}")
        if self.log_widget.wrap:
            parts.append("wrapped")
        if self.dropped:
            parts.append(f"{self.dropped:,} dropped (cap {MAX_HELD:,})")
        if not self.head_held:
            parts.append("earlier lines on scroll up")
        if not self.tail_held:
            parts.append("later lines on scroll down")
        if self.reading:
            parts.append("reading…")
        elif self.ended and self.tail_held:
            parts.append("trial ended: all lines read")
        elif self.paused:
            parts.append("paused (f: follow)")
        elif not self.follow and not self.new_lines:  # (new lines: their count says G)
            parts.append("G: follow")
        elif self.follow:
            parts.append("following")
        if self.new_lines:
            parts.append(f"{_lines(self.new_lines, 'new line')} (G: follow)")
        self.show("#title", ", ".join(parts))

    # keys

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
        self.open_tail()

    def _ask(self, what: str) -> None:
        box = self.query_one("#search", Input)
        self.asking = what
        box.placeholder = HINTS[what]
        box.value = self.pattern if what == "search" else self.range_text
        box.add_class("shown")
        box.focus()

    def action_search(self) -> None:
        self._ask("search")

    def action_time_range(self) -> None:
        self._ask("time")

    def _close_box(self) -> None:
        self.query_one("#search", Input).remove_class("shown")
        self.log_widget.focus()

    @on(Input.Submitted, "#search")
    def _submitted(self, event: Input.Submitted) -> None:
        self._close_box()
        if self.asking == "time":
            self._set_range(event.value)
            return
        self.pattern = event.value
        self.position = -1
        if self.only:
            self._redraw()
        else:
            self.log_widget.highlight(self._regex())
        self.action_next_match()

    def _set_range(self, text: str) -> None:
        try:
            self.since, self.until = time_range(text, self.now())
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.range_text = text.strip()
        self.open_tail()

    def _jump(self, found: Callable[[LogEntry], object], what: str, noun: str) -> None:
        """Go to the next shown line after the last one gone to for which `found` is true."""
        view = self.log_widget
        shown = view.entries
        for i in range(self.position + 1, len(shown)):
            if found(shown[i]):
                self.position = i
                self.follow = False
                view.go_to(i)
                self.at = noun  # the title says where: no toast that may time out
                self._title()
                return
        self.notify(f"no more {what}", severity="warning")
        self.position, self.at = -1, ""
        self._title()

    def action_next_match(self) -> None:
        if not self.pattern:
            self.action_search()
            return
        if (regex := self._regex()) is not None:
            self._jump(lambda e: regex.search(e.text), f"matches of /{self.pattern}/", "match")

    def action_only_matches(self) -> None:
        if not self.pattern:
            self.notify("search first (/): then o shows only the matching lines",
                        severity="warning")
            return
        self.only = not self.only
        self._redraw()

    def action_next_error(self) -> None:
        self._jump(lambda e: e.level == "E" or ERROR.search(e.text), "errors", "error")

    def action_toggle_wrap(self) -> None:
        self.log_widget.wrap = not self.log_widget.wrap
        self._title()

    def action_page_left(self) -> None:
        self.log_widget.page_sideways(-1)

    def action_page_right(self) -> None:
        self.log_widget.page_sideways(1)

    def action_toggle_follow(self) -> None:
        """Pause following (new lines are counted, the view stays), or follow again."""
        if self.paused or not self.follow:
            self.action_end()
            return
        self.follow, self.paused = False, True
        self._title()

    def action_end(self) -> None:
        """The newest lines, following them (read again if they were dropped)."""
        self.follow, self.paused, self.new_lines = True, False, 0
        if not self.tail_held:
            self.open_tail()
            return
        self.log_widget.scroll_end(animate=False, immediate=True)
        self._title()

    def action_home(self) -> None:
        """The log's first lines (read from the master unless held)."""
        self.follow = False
        if self.head_held:
            self.log_widget.scroll_home(animate=False, immediate=True)
        else:
            self.read_head()
        self._title()

    @work(group="page")
    async def read_head(self) -> None:
        """Hold the log's first page instead of what is held (later pages on scroll down)."""
        if self.paging:
            return
        self.paging, generation = True, self.generation
        try:
            items = await self.client.trial_log_page(self.trial_id, limit=PAGE, after=0,
                                                     **self._filters())
        except DettuiError as exc:
            if not isinstance(exc, MasterUnreachable):  # (that one: the banner says so)
                self.notify(f"page not read: {exc}", severity="error")
            return
        finally:
            self.paging = False
        if not self.live or generation != self.generation:
            return  # read afresh meanwhile (a filter changed)
        page = [self._entry(i) for i in items]
        self.held, self.new_lines = page, 0
        self.head_held, self.tail_held = True, len(page) < PAGE
        view = self.log_widget
        view.replace(self._shown(page))
        view.scroll_home(animate=False, immediate=True)
        self._title()

    def action_back(self) -> None:
        box = self.query_one("#search", Input)
        if box.has_class("shown"):
            self._close_box()
            return
        self.app.pop_screen()


def _lines(count: int, noun: str = "line") -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
