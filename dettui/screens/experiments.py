"""Experiments: state, progress and best metric, live; archived toggle; create from a dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Header

from dettui.screens.base import ApiScreen, Row, counted, progress_text, state_text
from dettui.widgets.keybar import KeyBar
from dettui.widgets.rowtable import Column, RowTable
from dettui.widgets.safe import Plain

COLUMNS = [  # priority: the narrower the screen, the sooner the higher numbers go
    Column("id", "ID", width=5, align="right"),
    Column("name", "Name"),
    Column("state", "State", width=17),
    Column("progress", "Progress", width=8, align="right"),
    Column("trials", "Trials", width=6, align="right", priority=2),
    Column("searcher", "Searcher", width=14, priority=4),
    Column("best", "Best", width=10, align="right", priority=1),
    Column("pool", "Pool", width=10, priority=5),
    Column("user", "Owner", width=12, priority=3),
    Column("archived", "Archived", width=8, priority=6),
]


WARNED = " !"  # after the state of an experiment with warnings (its screen's header says them)


def experiment_rows(exps: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for e in exps:
        best = e.get("bestTrialSearcherMetric")
        rows.append((str(e["id"]), {
            "id": int(e["id"]), "name": e.get("name", ""),
            "state": state_text(e.get("state")) + WARNED * bool(e.get("warnings")),
            "progress": progress_text(e.get("state"), e.get("progress")),
            "trials": e.get("numTrials", 0), "searcher": e.get("searcherType", ""),
            "best": f"{best:.5g}" if isinstance(best, int | float) else "",
            "pool": e.get("resourcePool", ""), "user": e.get("username", ""),
            "archived": "yes" if e.get("archived") else ""}))
    return rows


class ExperimentsScreen(ApiScreen):
    TABLE = "#experiments"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "create", "New"),
        Binding("slash", "filter", "Filter"),
        Binding("p", "control('pause')", "Pause"),
        Binding("a", "control('activate')", "Activate"),
        Binding("c", "control('cancel')", "Cancel…"),
        Binding("x", "control('kill')", "Kill…"),
        Binding("s", "sort_next", "Sort"),
        Binding("r", "sort_reverse", "Reverse"),
        Binding("z", "archive", "Archive/unarchive"),
        Binding("A", "toggle_archived", "Show archived"),
        Binding("D", "delete", "Delete…"),
        Binding("M", "more_rows", "More rows"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    DEFAULT_CSS = """
    ExperimentsScreen RowTable { height: 1fr; }
    ExperimentsScreen #title { background: $boost; padding: 0 1; text-style: bold; }
    """

    show_archived = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain("Experiments", id="title")
        yield self.filter_box()
        yield RowTable(COLUMNS, id="experiments")
        yield KeyBar()

    def on_mount(self) -> None:
        self.table.focus()
        self.run_feed()

    @work(exclusive=True, group="feed")
    async def run_feed(self) -> None:  # type: ignore[override]
        await self.feed(self.windowed("experiments"), self.table, experiment_rows)

    def on_feed(self, topic: str) -> None:
        t = self.table
        if not self.show_archived:
            hidden = [k for k in t.keys if (t.row(k) or {}).get("archived")]
            if hidden:
                t.apply(remove=hidden)
        self.view_changed()

    def view_changed(self) -> None:
        t = self.table
        self.show("#title", f"Experiments: {counted(t)}",
                  " (with archived)" if self.show_archived else "",
                  f", filter {t.filter_text!r}" if t.filter_text else "",
                  self.more_text("experiments"),
                  "  (! has warnings: enter shows them)" if any(
                      str((t.row(k) or {}).get("state", "")).endswith(WARNED) for k in t.keys)
                  else "")

    def action_toggle_archived(self) -> None:
        self.show_archived = not self.show_archived
        self.run_feed()  # a fresh snapshot brings the archived ones back

    def _selected(self) -> int | None:
        key = self.table.cursor_key
        if key is None:
            self.notify("no experiment selected", severity="warning")
            return None
        return int(key)

    @work(group="dialog")
    async def action_control(self, verb: str) -> None:
        exp_id = self._selected()
        if exp_id is not None:
            row = self.table.row(str(exp_id)) or {}
            await self.control(exp_id, verb, str(row.get("name") or ""),
                               str(row.get("state") or "").removesuffix(WARNED))

    async def action_archive(self) -> None:
        exp_id = self._selected()
        if exp_id is None:
            return
        row = self.table.row(str(exp_id)) or {}
        verb = "unarchive" if row.get("archived") else "archive"
        await self.call(f"{verb} experiment {exp_id}",
                        lambda: self.client.experiment_action(exp_id, verb),
                        done=f"experiment {exp_id} {verb}d")

    @work(group="dialog")
    async def action_delete(self) -> None:
        exp_id = self._selected()
        if exp_id is None:
            return
        row = self.table.row(str(exp_id)) or {}
        label = f"experiment {exp_id}" + (f" ({row['name']})" if row.get("name") else "")
        if not await self.confirm(
                f"Delete {label} for good?", "Its checkpoints, logs and metrics are removed "
                "from disk and from the database. This cannot be undone. (Only an experiment "
                "that has ended can be deleted; `z` archives one instead.)", "delete it"):
            self.notify(f"{label} kept", timeout=2)
            return
        await self.call(f"delete {label}", lambda: self.client.delete_experiment(exp_id),
                        done=f"{label} deleted")

    def action_open(self) -> None:
        exp_id = self._selected()
        if exp_id is not None:
            from dettui.screens.experiment import ExperimentScreen

            self.app.push_screen(ExperimentScreen(exp_id))

    @on(RowTable.CursorMoved)
    def _maybe_more(self, _: RowTable.CursorMoved) -> None:
        if self.at_end():
            self.action_more_rows()

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
