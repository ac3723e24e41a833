"""What every dashboard screen shares: the API client, actions that report their errors as
notifications, a one-line prompt, and a live feed of one stream topic into a RowTable."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DirectoryTree, Input, Label

from dettui.client import Client
from dettui.errors import DettuiError
from dettui.widgets.rowtable import RowTable

Row = tuple[str, dict[str, Any]]


def counted(table: RowTable) -> str:
    """How many rows are shown: "12", or "3 of 12" when a filter hides some."""
    if table.row_count == table.total_count:
        return str(table.total_count)
    return f"{table.row_count} of {table.total_count}"


def state_text(value: str | None) -> str:
    return (value or "").removeprefix("STATE_")


class PromptScreen(ModalScreen[str | None]):
    """Ask for one value; Enter answers, Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical { width: 70; height: auto; border: thick $accent;
                              background: $surface; padding: 1 2; }
    """

    def __init__(self, question: str, value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            yield Input(value=self.value, placeholder=self.placeholder, id="answer")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


FILTER_HINT = ("filter: text in any cell, or column:text (state:queued pool:gpu user:alice); "
               "Enter applies, Escape clears")


class _Tree(DirectoryTree):
    """Directories, and the files `want` accepts; hidden entries and caches left out."""

    def __init__(self, path: Path, want: Callable[[Path], bool], **kw: Any) -> None:
        super().__init__(path, **kw)
        self.want = want

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [p for p in paths if not p.name.startswith(".") and p.name != "__pycache__"
                and (_is_dir(p) or self.want(p))]


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


class PathPrompt(PromptScreen):
    """Ask for a path: type it, or pick it in the tree below (Tab moves between them).
    `files`: pick a file among those `want` accepts; else a directory."""

    DEFAULT_CSS = """
    PathPrompt > Vertical { height: 80%; }
    PathPrompt DirectoryTree { height: 1fr; margin-top: 1; }
    """

    def __init__(self, question: str, value: str, *, files: bool,
                 want: Callable[[Path], bool] = lambda _: True) -> None:
        super().__init__(question, value)
        self.files = files
        self.want = want if files else (lambda _: False)

    def compose(self) -> ComposeResult:
        start = Path(self.value or ".").expanduser()
        root = start if _is_dir(start) else start.parent
        with Vertical():
            yield Label(self.question)
            yield Input(value=self.value, id="answer")
            yield _Tree(root if _is_dir(root) else Path("."), self.want, id="tree")

    @on(DirectoryTree.FileSelected)
    def _file(self, event: DirectoryTree.FileSelected) -> None:
        if self.files:
            self.query_one("#answer", Input).value = str(event.path)
            self.query_one("#answer", Input).focus()

    @on(DirectoryTree.DirectorySelected)
    def _directory(self, event: DirectoryTree.DirectorySelected) -> None:
        if not self.files:
            self.query_one("#answer", Input).value = str(event.path)


class ApiScreen(Screen[None]):
    """A screen that talks to the master through the app's client. Its `TABLE` is what the
    sort keys (bound to `sort_next`, `sort_reverse`) and the filter box (`filter_box()` in
    compose, `/` and Escape bound to `filter` and `clear_filter`) act on."""

    DEFAULT_CSS = """
    ApiScreen #filter { display: none; }
    ApiScreen #filter.shown { display: block; }
    """

    TABLE: ClassVar[str] = ""  # selector of the table that sort and filter keys act on

    @property
    def table(self) -> RowTable:
        return self.query_one(self.TABLE, RowTable)

    def view_changed(self) -> None:
        """After the table's sort or filter changed (e.g. to retitle the screen)."""

    def action_sort_next(self) -> None:
        self.table.cycle_sort()
        self.view_changed()

    def action_sort_reverse(self) -> None:
        self.table.reverse_sort()
        self.view_changed()

    def filter_box(self) -> Input:
        return Input(placeholder=FILTER_HINT, id="filter")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        self.table.set_filter(event.value)
        self.table.focus()
        self.view_changed()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.table.set_filter("")
        self.table.focus()
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

    async def call(self, what: str, fn: Callable[[], Awaitable[Any]]) -> bool:
        """Run one API action; errors become notifications, never exceptions."""
        try:
            await fn()
        except DettuiError as exc:
            self.notify(exc.message, title=f"cannot {what}", severity="error")
            return False
        except Exception as exc:  # noqa: BLE001 - a dashboard action must not crash the app
            self.notify(str(exc), title=f"cannot {what}", severity="error")
            return False
        self.notify(what, timeout=2)
        return True

    async def ask(self, question: str, value: str = "") -> str | None:
        return await self.app.push_screen_wait(PromptScreen(question, value))

    async def ask_path(self, question: str, value: str, *, files: bool,
                       want: Callable[[Path], bool] = lambda _: True) -> str | None:
        return await self.app.push_screen_wait(PathPrompt(question, value, files=files,
                                                          want=want))

    async def feed(self, topic: str, table: RowTable, rows: Callable[[list[dict[str, Any]]],
                                                                       list[Row]]) -> None:
        """Apply the master's push stream for `topic` to `table` until the screen goes."""
        async for message in self.client.changes([topic]):
            if "error" in message:
                self.notify(str(message["error"]), severity="error")
                continue
            if message.get("topic") != topic:
                continue
            if not self.live:
                return
            upsert = rows(list(message.get("upsert") or []))
            if message.get("kind") == "snapshot":
                table.set_rows(_ordered(upsert, message.get("order")))
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
