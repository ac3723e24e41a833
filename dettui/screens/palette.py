"""The command palette (ctrl+p): every binding of every screen, each with its key. An action of
the screen the palette was opened on runs there; one of another section's screen goes there
first; one that needs an open experiment or trial says how to open one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape

from dettui.screens.help import key_label
from dettui.widgets.rowtable import RowTable


@dataclass(frozen=True)
class Entry:
    text: str  # what is matched and shown: "Queue: Kill (x)"
    help: str
    run: Callable[[], Awaitable[Any] | None]


def screens() -> list[tuple[str, type[Any], str | None]]:
    """(title, screen class, the mode whose base it is, if any), in the order of the sections."""
    from dettui.screens.cluster import ClusterScreen
    from dettui.screens.compare import CompareScreen
    from dettui.screens.experiment import ExperimentScreen
    from dettui.screens.experiments import ExperimentsScreen
    from dettui.screens.logs import LogsScreen
    from dettui.screens.queue import QueueScreen

    return [("Queue", QueueScreen, "queue"), ("Experiments", ExperimentsScreen, "experiments"),
            ("Experiment", ExperimentScreen, None), ("Compare", CompareScreen, None),
            ("Logs", LogsScreen, None), ("Cluster", ClusterScreen, "cluster")]


def _described(bindings: list[Any]) -> Iterator[Binding]:
    """One binding per action, with every key bound to it (`q`, `ctrl+q` -> `q,ctrl+q`)."""
    keys: dict[str, list[str]] = {}
    first: dict[str, Binding] = {}
    for b in bindings:
        if isinstance(b, Binding) and b.description:
            first.setdefault(b.action, b)
            keys.setdefault(b.action, []).append(b.key)
    for action, b in first.items():
        yield replace(b, key=",".join(keys[action])) if len(keys[action]) > 1 else b


# How to open each screen that is no section's base: (what, the keys that open it)
OPEN_FIRST = {
    "Experiment": ("an experiment", "Enter on a row of the experiments screen (2)"),
    "Compare": ("a comparison", "C on an experiment's trials (space or T selects them)"),
    "Logs": ("a trial's logs", "l on an experiment's trial"),
}


class Actions(Provider):
    """Every key's action: the app's, every screen's and the tables'."""

    def entries(self) -> Iterator[Entry]:
        app, here = self.app, self.screen
        for b in _described(list(app.BINDINGS)):
            go = "Go to " if b.action.startswith("section(") else ""
            yield Entry(f"{go}{b.description} ({key_label(b)})", "anywhere",
                        lambda b=b: app.run_action(b.action))
        for title, cls, mode in screens():
            for b in _described(list(cls.BINDINGS)):
                yield Entry(f"{title}: {b.description} ({key_label(b)})",
                            *self._target(here, title, cls, mode, b.action))
        table = here.focused if isinstance(here.focused, RowTable) else None
        for b in _described(list(RowTable.BINDINGS)):
            yield Entry(f"Table: {b.tooltip or b.description} ({key_label(b)})",
                        "the focused table",
                        (lambda b=b: table.run_action(b.action)) if table is not None
                        else (lambda: app.notify("no table has the focus here",
                                                 severity="warning")))

    def _target(self, here: Any, title: str, cls: type[Any], mode: str | None,
                action: str) -> tuple[str, Callable[[], Awaitable[Any] | None]]:
        app = self.app
        if isinstance(here, cls):
            return "on this screen", lambda: here.run_action(action)
        if mode is not None:
            async def go() -> None:
                await app.switch_mode(mode)
                await app.screen.run_action(action)
            return f"goes to the {title.lower()} screen first", go
        where, how = OPEN_FIRST[title]
        return (f"needs {where} open: {how}",
                lambda: app.notify(f"open {where} first: {how}", severity="warning"))

    async def discover(self) -> Hits:
        for entry in self.entries():
            yield DiscoveryHit(Text(entry.text), entry.run, text=entry.text,
                               help=escape(entry.help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry in self.entries():
            score = matcher.match(entry.text)
            if score > 0:
                yield Hit(score, matcher.highlight(entry.text), entry.run, text=entry.text,
                          help=escape(entry.help))
