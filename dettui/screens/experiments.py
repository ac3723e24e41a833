"""Experiments: state, progress and best metric, live; archived toggle; create from a dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Header, Static

from dettui.screens.base import ApiScreen, Row, counted, state_text
from dettui.widgets.rowtable import Column, RowTable

COLUMNS = [
    Column("id", "ID", width=5, align="right"),
    Column("name", "Name"),
    Column("state", "State", width=12),
    Column("progress", "Progress", width=8, align="right"),
    Column("trials", "Trials", width=6, align="right"),
    Column("searcher", "Searcher", width=14),
    Column("best", "Best", width=12, align="right"),
    Column("pool", "Pool", width=10),
    Column("user", "Owner", width=12),
    Column("archived", "Archived", width=8),
]


def experiment_rows(exps: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for e in exps:
        best = e.get("bestValidation") if isinstance(e.get("bestValidation"), int | float) \
            else e.get("searcherMetricValue")
        progress = e.get("progress")
        rows.append((str(e["id"]), {
            "id": int(e["id"]), "name": e.get("name", ""), "state": state_text(e.get("state")),
            "progress": f"{progress * 100:.0f}%" if isinstance(progress, int | float) else "",
            "trials": e.get("numTrials", 0), "searcher": e.get("searcherType", ""),
            "best": f"{best:.5g}" if isinstance(best, int | float) else "",
            "pool": e.get("resourcePool", ""), "user": e.get("username", ""),
            "archived": "yes" if e.get("archived") else ""}))
    return rows


class ExperimentsScreen(ApiScreen):
    TABLE = "#experiments"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "create", "New experiment"),
        Binding("A", "toggle_archived", "Show archived"),
        Binding("p", "control('pause')", "Pause"),
        Binding("a", "control('activate')", "Activate"),
        Binding("c", "control('cancel')", "Cancel"),
        Binding("x", "control('kill')", "Kill"),
        Binding("z", "archive", "Archive/unarchive"),
        Binding("D", "delete", "Delete"),
        Binding("s", "sort_next", "Sort"),
        Binding("r", "sort_reverse", "Reverse"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    DEFAULT_CSS = """
    ExperimentsScreen RowTable { height: 1fr; }
    ExperimentsScreen #title { background: $boost; padding: 0 1; text-style: bold; }
    """

    show_archived = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Experiments", id="title")
        yield self.filter_box()
        yield RowTable(COLUMNS, id="experiments")
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()
        self.run_feed()

    @work(exclusive=True, group="feed")
    async def run_feed(self) -> None:
        await self.feed("experiments", self.table, experiment_rows)

    def on_feed(self, topic: str) -> None:
        t = self.table
        if not self.show_archived:
            hidden = [k for k in t.keys if (t.row(k) or {}).get("archived")]
            if hidden:
                t.apply(remove=hidden)
        self.view_changed()

    def view_changed(self) -> None:
        t = self.table
        self.query_one("#title", Static).update(
            f"Experiments: {counted(t)}" + (" (with archived)" if self.show_archived else "")
            + (f", filter {t.filter_text!r}" if t.filter_text else ""))

    def action_toggle_archived(self) -> None:
        self.show_archived = not self.show_archived
        self.run_feed()  # a fresh snapshot brings the archived ones back

    def _selected(self) -> int | None:
        key = self.table.cursor_key
        if key is None:
            self.notify("no experiment selected", severity="warning")
            return None
        return int(key)

    async def action_control(self, verb: str) -> None:
        exp_id = self._selected()
        if exp_id is not None:
            await self.call(f"{verb} experiment {exp_id}",
                            lambda: self.client.experiment_action(exp_id, verb))

    async def action_archive(self) -> None:
        exp_id = self._selected()
        if exp_id is None:
            return
        row = self.table.row(str(exp_id)) or {}
        verb = "unarchive" if row.get("archived") else "archive"
        await self.call(f"{verb} experiment {exp_id}",
                        lambda: self.client.experiment_action(exp_id, verb))

    @work(group="dialog")
    async def action_delete(self) -> None:
        exp_id = self._selected()
        if exp_id is None:
            return
        answer = await self.ask(f"Delete experiment {exp_id} with all its checkpoints, logs and "
                                "metrics for good? Type yes to confirm")
        if (answer or "").lower() != "yes":
            self.notify(f"experiment {exp_id} kept", timeout=2)
            return
        await self.call(f"delete experiment {exp_id}", lambda: self.client.request(
            "DELETE", f"/api/v1/experiments/{exp_id}"))

    def action_open(self) -> None:
        exp_id = self._selected()
        if exp_id is not None:
            from dettui.screens.experiment import ExperimentScreen

            self.app.push_screen(ExperimentScreen(exp_id))

    @on(RowTable.Selected)
    def _open(self, _: RowTable.Selected) -> None:
        self.action_open()



    @work(group="dialog")
    async def action_create(self) -> None:
        start = Path("sample_ctx/single.yaml")
        config = await self.ask_path(
            "Experiment config (YAML): type a path or pick one below", str(start)
            if start.exists() else "", files=True,
            want=lambda p: p.suffix.lower() in (".yaml", ".yml"))
        if not config:
            return
        context_dir = await self.ask_path(
            "Context directory (what the trial runs from): type or pick",
            str(Path(config).parent or "."), files=False)
        if not context_dir:
            return
        await self.call(f"create experiment from {config}",
                        lambda: self._create(Path(config), Path(context_dir)))

    async def _create(self, config: Path, context_dir: Path) -> None:
        import asyncio

        from dettui import context
        from dettui.config import load_config
        from dettui.errors import ConfigError

        try:
            text = config.read_text()
        except OSError as exc:
            raise ConfigError([f"cannot read {config}: {exc.strerror}"], str(config)) from exc
        load_config(text, source=str(config))
        files = await asyncio.to_thread(context.pack, context_dir, [])
        body = await self.client.create_experiment(text, files, activate=True)
        self.notify(f"created experiment {body['experiment']['id']}")
