"""What every dashboard screen shares: the API client, actions that report their errors as
notifications, a one-line prompt, a live feed of one stream topic into a RowTable, and the
connection banner (with its rows marked stale) while the master cannot be reached."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from textual import events, on
from textual.screen import Screen
from textual.widgets import Header, Input, Static

from dettui.client import Client
from dettui.errors import DettuiError
from dettui.screens.connection import HEARTBEAT, Connection, Outage
from dettui.screens.dialogs import ConfirmScreen, PathPrompt, PromptScreen
from dettui.screens.guard import Guarded
from dettui.widgets.banner import Banner
from dettui.widgets.rowtable import RowTable
from dettui.widgets.safe import PlainInput, plain_lines

Row = tuple[str, dict[str, Any]]


def counted(table: RowTable, noun: str = "") -> str:
    """How many rows are shown: "12 jobs", "1 job", or "3 of 12 jobs" when a filter hides
    some."""
    total = table.total_count
    word = f" {noun}{'' if total == 1 else 's'}" if noun else ""
    if table.row_count == total:
        return f"{total}{word}"
    return f"{table.row_count} of {total}{word}"


def state_text(value: str | None) -> str:
    return (value or "").removeprefix("STATE_")


def progress_text(state: str | None, progress: object) -> str:
    """"40%": the progress the master keeps, in every state (an ERROR or CANCELED experiment
    keeps what it had reached), as `dettui e list` shows it."""
    if not isinstance(progress, int | float) or isinstance(progress, bool):
        return ""
    return f"{progress * 100:.0f}%"


ENDED = ("COMPLETED", "CANCELED", "ERROR", "DELETED")
STOPS = {
    "cancel": ("Cancel {label}?", "Its running trials are asked to checkpoint and stop, and "
               "its waiting trials will not start. Checkpoints, logs and metrics are kept; the "
               "experiment ends CANCELED."),
    "kill": ("Kill {label}?", "Its running trials are ended at once, without waiting for a "
             "checkpoint: what they did since their last checkpoint is lost. Checkpoints, logs "
             "and metrics so far are kept; the experiment ends CANCELED."),
}
PAST = {"pause": "paused", "activate": "activated", "cancel": "canceling",
        "kill": "killing", "archive": "archived", "unarchive": "unarchived"}

FILTER_HINT = ("filter: text in any cell, column:text (state:queued user:alice) or a "
               "comparison (lr>0.01); Enter applies, Escape clears, Escape again closes")


class ApiScreen(Guarded, Screen[None]):
    """A screen that talks to the master through the app's client. Its `TABLE` is what the
    sort keys (bound to `sort_next`, `sort_reverse`) and the filter box (`filter_box()` in
    compose, `/` and Escape bound to `filter` and `clear_filter`) act on."""

    DEFAULT_CSS = """
    ApiScreen #filter { display: none; }
    ApiScreen #filter.shown { display: block; }
    ApiScreen.-stale RowTable { text-opacity: 55%; }
    """

    TABLE: ClassVar[str] = ""  # selector of the table that sort and filter keys act on
    WINDOW: ClassVar[int] = 500  # rows a windowed feed (a long list) reads at first and more
    window = WINDOW  # rows the windowed feed asks for now (`more_rows` adds WINDOW)
    fed = False  # what the screen shows came from the master at least once
    title_parts: tuple[object, ...] | None = None  # the title as last shown, before its marker

    @property
    def totals(self) -> dict[str, int]:
        """Per windowed topic, the whole list's length (its messages' `total`)."""
        if "_totals" not in self.__dict__:
            self.__dict__["_totals"] = {}
        return self.__dict__["_totals"]  # type: ignore[no-any-return]

    def windowed(self, base: str) -> str:
        """The topic for the first `window` objects of a long list (`experiments?limit=N`)."""
        return f"{base}?limit={self.window}"

    def more_text(self, base: str) -> str:
        """", 500 loaded of 10000 (M for more)" while the window holds less than the list."""
        total = self.totals.get(self.windowed(base))
        if total is None or total <= self.window:
            return ""
        return f", {self.window} loaded of {total} (M for more)"

    def action_more_rows(self) -> None:
        """The next WINDOW rows of a windowed list (also when the cursor reaches its end)."""
        self.window += self.WINDOW
        self.run_feed()

    def run_feed(self) -> None:
        """(Re)start the screen's feed (screens with a windowed list define it)."""

    def at_end(self) -> bool:
        """Whether the cursor is on the table's last row and the window holds less than the
        whole list."""
        t = self.table
        order = t.keys_in_view_order
        return bool(order) and t.cursor_key == order[-1] and any(
            v > self.window for v in self.totals.values())

    @property
    def table(self) -> RowTable:
        return self.query_one(self.TABLE, RowTable)

    def view_changed(self) -> None:
        """After the table's sort or filter changed (e.g. to retitle the screen)."""

    def on_screen_resume(self) -> None:
        shown = getattr(self.app, "section_shown", None)
        if shown is not None:
            shown(self)

    def show(self, selector: str, *parts: object) -> None:
        """Put text in a Static: user text included, never read as markup; a part that
        starts with a newline starts a line (`plain_lines`). The title says when what the
        screen shows is stale (the master cannot be reached)."""
        if selector == "#title":
            self.title_parts = parts
            outage = self.connection.outage if self.connection is not None else None
            if outage is not None:  # on the title's first line
                at = next((i for i, p in enumerate(parts) if str(p).startswith("\n")),
                          len(parts))
                state = "STALE" if self.fed else "NOT READ YET"
                parts = (*parts[:at], f" — {state}: master unreachable since {outage.clock()}",
                         *parts[at:])
        self.query_one(selector, Static).update(plain_lines(*parts))

    # -- the connection: a banner and stale rows while the master cannot be reached ------

    @property
    def connection(self) -> Connection | None:
        return getattr(self.app, "connection", None)

    @on(events.Mount)
    def _follow_connection(self) -> None:
        """Put the banner under the header; follow the dashboard's connection to the master."""
        anchor = next((c for c in self.children if not isinstance(c, Header)), None)
        outage = self.connection.outage if self.connection is not None else None
        banner = Banner(outage.text() if outage else "", id="connection")
        banner.set_class(outage is not None, "shown")
        self.set_class(outage is not None, "-stale")
        if anchor is None:
            self.mount(banner)
        else:
            self.mount(banner, before=anchor)
        signal = getattr(self.app, "connection_changed", None)
        if signal is not None:
            signal.subscribe(self, self._connection_changed)
        if outage is not None:  # the title says so too, once composed
            self.call_after_refresh(self._connection_changed, (outage, False))

    def _connection_changed(self, change: tuple[Outage | None, bool]) -> None:
        outage, came_back = change
        if not self.live:
            return
        for banner in self.query("#connection").results(Banner):
            banner.say(outage.text() if outage else "")
        self.set_class(outage is not None, "-stale")
        titles = self.query("#title")
        if self.title_parts is None and titles:  # the title it was composed with
            self.title_parts = (str(titles.first(Static).content),)
        if self.title_parts is not None:
            self.show("#title", *self.title_parts)
        if came_back:
            self.reconnected()

    def reconnected(self) -> None:
        """The master answers again after an outage: the feeds have fresh snapshots; a
        screen reads again what it read outside them (e.g. a header, a list of pools)."""

    def action_sort_next(self) -> None:
        self.table.cycle_sort()
        self.view_changed()

    def action_sort_reverse(self) -> None:
        self.table.reverse_sort()
        self.view_changed()

    def filter_box(self) -> Input:
        return PlainInput(placeholder=FILTER_HINT, id="filter")

    def action_filter(self) -> None:
        """Show the filter box and focus it now (not after the events already read, as
        `focus()` would): keys typed right after `/` in one burst go into the box, never to
        the table's bindings (`/sn` re-sorted, then opened New experiment)."""
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        self.set_focus(box)

    def on_key(self, event: events.Key) -> None:
        """Keys typed right after `/` go into the filter box, though read in one burst with
        it (tmux, a fast typist): the table had them already and passed them up, where the
        screen's bindings would take them (`/sn` sorted, then opened New experiment). So `/`
        opens the box here, in the order the keys came, and a printable key that comes up
        while the box has the focus (the box keeps those it is typed) goes into it."""
        box = next(self.query("#filter").results(Input), None)
        if box is None:
            return
        if self.focused is box and event.is_printable:  # (has_focus waits for its Focus)
            event.stop()
            event.prevent_default()
            box.post_message(events.Key(event.key, event.character))
        elif event.key == "slash" and self.focused is not box:
            event.stop()
            event.prevent_default()
            self.action_filter()

    @on(events.Paste)
    def _paste_to_filter(self, event: events.Paste) -> None:
        """A paste that reaches the screen (the table has focus) is text to filter by, never
        keys (p, a, c are row actions): it goes into the filter box."""
        box = next(self.query("#filter").results(Input), None)
        if box is None or self.focused is box:
            return
        event.stop()
        self.action_filter()
        box.post_message(events.Paste(event.text))

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        self.table.set_filter(event.value)
        self.table.focus()
        self.view_changed()

    def action_clear_filter(self) -> None:
        """Escape in the filter box clears its text and stays there (what is typed next goes
        into the box, never to the table); Escape in an empty box closes it; Escape on the
        table clears the filter. The cursor stays on the row it was on."""
        box = self.query_one("#filter", Input)
        if box.has_focus and box.value:
            box.value = ""
        elif box.has_focus:
            box.remove_class("shown")
            self.table.focus()
        else:
            box.value = ""
            box.remove_class("shown")
        self.table.set_filter("")
        self.view_changed()

    @property
    def client(self) -> Client:
        client = getattr(self.app, "client", None)
        assert client is not None, "the dashboard has no client yet"
        return client

    @property
    def live(self) -> bool:
        """Still on the app and not being taken down: a worker that awaited the API checks
        this before touching widgets (a closing screen loses its children first)."""
        return self.is_attached and not (self._closing or self._closed or self._pruning)

    async def call(self, what: str, fn: Callable[[], Awaitable[Any]],
                   done: str | None = None) -> bool:
        """Run one API action (`what`: "kill experiment 3"); errors become notifications
        ("cannot kill experiment 3"), never exceptions; success says `done`."""
        try:
            await fn()
        except DettuiError as exc:
            self.notify(exc.message, title=f"cannot {what}", severity="error")
            return False
        except Exception as exc:  # noqa: BLE001 - a dashboard action must not crash the app
            self.notify(str(exc), title=f"cannot {what}", severity="error")
            return False
        self.notify(done or what, timeout=2)
        return True

    async def control(self, exp_id: int, verb: str, name: str = "", state: str = "") -> None:
        """Pause, activate, cancel or kill an experiment; cancel and kill say what they will
        do and wait for `y`; on an experiment that has ended they do nothing and say so."""
        label = f"experiment {exp_id}" + (f" ({name})" if name else "")
        if verb in STOPS and state in ENDED:
            self.notify(f"{label} has already ended ({state}): nothing to {verb}",
                        severity="warning")
            return
        if verb in STOPS:
            question, consequence = STOPS[verb]
            if not await self.confirm(question.format(label=label), consequence, f"{verb} it"):
                self.notify(f"{label} left as it was", timeout=2)
                return
        await self.call(f"{verb} {label}", lambda: self.client.experiment_action(exp_id, verb),
                        done=f"{label}: {PAST[verb]}")

    async def ask(self, question: str, value: str = "") -> str | None:
        return await self.app.push_screen_wait(PromptScreen(question, value))

    async def confirm(self, question: str, consequence: str, verb: str) -> bool:
        return bool(await self.app.push_screen_wait(ConfirmScreen(question, consequence, verb)))

    async def ask_path(self, question: str, value: str, *, files: bool,
                       want: Callable[[Path], bool] = lambda _: True) -> str | None:
        return await self.app.push_screen_wait(PathPrompt(question, value, files=files,
                                                          want=want))

    async def feed(self, topic: str, table: RowTable, rows: Callable[[list[dict[str, Any]]],
                                                                       list[Row]]) -> None:
        """Apply the master's push stream for `topic` to `table` until the screen goes;
        tell the dashboard's connection when the stream breaks and when it is heard again."""
        link = self.connection
        feed = link.open() if link is not None else 0
        try:
            await self._feed(topic, table, rows, link, feed)
        finally:
            if link is not None:
                link.close(feed)

    async def _feed(self, topic: str, table: RowTable,
                    rows: Callable[[list[dict[str, Any]]], list[Row]],
                    link: Connection | None, feed: int) -> None:
        lost = (lambda why: link.lost(feed, why)) if link is not None else None
        async for message in self.client.changes([topic], heartbeat=HEARTBEAT, lost=lost):
            if link is not None:
                link.heard(feed)
            if "error" in message:
                self.notify(str(message["error"]), severity="error")
                continue
            if message.get("topic") != topic:
                continue
            if not self.live:
                return
            if isinstance(message.get("total"), int):
                self.totals[topic] = message["total"]
            upsert = rows(list(message.get("upsert") or []))
            if message.get("kind") == "snapshot":
                table.set_rows(_ordered(upsert, message.get("order")))
                self.fed = True
            else:
                table.apply(upsert=upsert, remove=[str(k) for k in message.get("remove") or []],
                            order=[str(k) for k in message["order"]]
                            if message.get("order") is not None else None)
            if self.live:
                self.on_feed(topic)

    def on_feed(self, topic: str) -> None:
        """Called after each message of a feed (e.g. to update a title)."""


def _ordered(rows: list[Row], order: list[Any] | None) -> list[Row]:
    if not order:
        return rows
    by_key = dict(rows)
    return [(str(k), by_key[str(k)]) for k in order if str(k) in by_key]
