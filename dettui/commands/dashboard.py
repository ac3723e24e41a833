"""`dettui` with no command: the dashboard, with an embedded master and local agent unless
`--master URL` points at a remote one. The dashboard is an API client either way, fed by the
master's push stream."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import Hit, Hits, Provider

from dettui import client as api
from dettui.screens.cluster import ClusterScreen
from dettui.screens.experiments import ExperimentsScreen
from dettui.screens.help import HelpScreen, describe_keys
from dettui.screens.queue import QueueScreen


class Actions(Provider):
    """The command palette: every key's action on the current screen, and the screens."""

    def _actions(self) -> Iterator[tuple[str, Any]]:
        app = self.app
        for name, mode in (("Queue", "queue"), ("Experiments", "experiments"),
                           ("Cluster", "cluster")):
            yield f"Go to {name}", partial(app.switch_mode, mode)
        yield "Help: every key", app.action_help
        screen = app.screen
        for binding in getattr(screen, "BINDINGS", []):
            if isinstance(binding, Binding) and binding.description:
                yield (f"{type(screen).__name__.removesuffix('Screen')}: "
                       f"{binding.description} ({binding.key})",
                       partial(screen.run_action, binding.action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, callback in self._actions():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help=text)


class Dashboard(App[None]):
    TITLE = "dettui"
    MODES: ClassVar[dict[str, Any]] = {  # type: ignore[misc]
        "queue": QueueScreen, "experiments": ExperimentsScreen, "cluster": ClusterScreen,
    }
    COMMANDS = App.COMMANDS | {Actions}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "switch_mode('queue')", "Queue"),
        Binding("2", "switch_mode('experiments')", "Experiments"),
        Binding("3", "switch_mode('cluster')", "Cluster"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, master: str | None, state_dir: Path) -> None:
        super().__init__()
        self.master = master
        self.state_dir = state_dir
        self._runner: Any = None
        self._agent: Any = None
        self._agent_task: asyncio.Task[None] | None = None
        self.client: api.Client | None = None

    async def on_mount(self) -> None:
        self.client = await self.connect()
        await self.switch_mode("queue")

    async def connect(self) -> api.Client:
        """The API client: to the embedded master (started here) or to `--master URL`."""
        url = self.master
        if url is None:
            url = await self._embed()
            client = api.Client(url)
            await client.login("determined", "")
        else:
            client = await api.authenticated(url)
        self.sub_title = url
        return client

    def action_help(self) -> None:
        from dettui.widgets.rowtable import RowTable

        screen = self.screen
        text = describe_keys(
            (f"{type(screen).__name__.removesuffix('Screen')} screen",
             list(getattr(screen, "BINDINGS", []))),
            ("Tables", list(RowTable.BINDINGS)),
            ("Everywhere", list(self.BINDINGS) + [Binding("ctrl+p", "command_palette",
                                                          "Command palette: every action")]),
        )
        if any(isinstance(b, Binding) and b.action == "filter"
               for b in getattr(screen, "BINDINGS", [])):
            text += ("\n[b]Filter[/b] (/)\n  any text matches any cell; column:text matches one "
                     "column,\n  by key or title: state:queued pool:gpu user:alice\n")
        self.push_screen(HelpScreen(text))

    async def _embed(self) -> str:
        from dettui.commands.runtime import embedded_agent
        from dettui.master.app import start_master
        from dettui.master.settings import MasterSettings

        settings = MasterSettings(state_dir=self.state_dir, port=8080)
        try:  # the CLI's default address, so `dettui e create ...` in another shell finds it
            self._runner, url = await start_master(settings)
        except OSError:
            settings = MasterSettings(state_dir=self.state_dir, port=0)
            self._runner, url = await start_master(settings)
        self._agent = await embedded_agent(self._runner, url, settings, 1, "default")
        self._agent_task = asyncio.create_task(self._agent.run())
        return url

    async def on_unmount(self) -> None:
        if self._agent is not None and self._agent_task is not None:
            self._agent.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._agent_task, 20)
        if self.client is not None:
            await self.client.close()
        if self._runner is not None:
            await self._runner.cleanup()


def run_dashboard(args: argparse.Namespace) -> int:
    from dettui.cli import _default_state_dir

    state_dir = args.state_dir or _default_state_dir()
    _log_to_file(state_dir / "dettui.log")
    Dashboard(args.master, state_dir).run()
    return 0


def _log_to_file(path: Path) -> None:
    """The terminal belongs to the dashboard: the master's and agent's logs go to a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
