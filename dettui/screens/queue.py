"""The job queue (seed 003): `dettui job list`'s columns, live, sortable and filterable, with
keys to reorder jobs, change priority, weight or pool, and control their experiments. Why a
job waits (the master's `waitReason`) is a column where the screen is wide, and the line under
the table says it for the selected job at any width."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Console
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Header, Static

from dettui.screens.base import ApiScreen, Row, counted, state_text
from dettui.widgets.keybar import KeyBar
from dettui.widgets.rowtable import Column, RowTable
from dettui.widgets.safe import Plain, plain

COLUMNS = [  # priority: the narrower the screen, the sooner the higher numbers go
    Column("pos", "#", width=4, align="right"),
    Column("id", "ID", width=8),
    Column("type", "Type", width=10, priority=5),
    Column("name", "Job Name"),
    Column("priority", "Prio/Weight", width=11, align="right", priority=1),
    Column("submitted", "Submitted", width=19, priority=4),
    Column("slots", "Slots", width=5, align="right"),
    Column("state", "State"),
    Column("why", "Why waiting", width=52, priority=6),  # the longest words of the common reasons
    Column("user", "User", width=12, priority=2),
    Column("pool", "Pool", width=10, priority=3),
]
WHY_CAP = 200  # characters of a reason shown (the master words them in well under that)
WHY_LINES = 3  # lines the selected job's reason takes under the table, at most


def job_rows(jobs: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for entry in jobs:
        j = entry.get("full", entry)  # job-queues-v2 wraps each job
        ahead = j.get("summary", {}).get("jobsAhead", -1)
        kind = str(j.get("type", "")).removeprefix("TYPE_").lower()
        name = f"{j['name']} ({j['entityId']})" if kind == "experiment" else j["name"]
        state = job_state(j)
        rows.append((str(j["jobId"]), {
            "pos": ahead if ahead >= 0 else "", "id": j["jobId"][:8], "type": kind,
            "name": name, "priority": j.get("priority") if j.get("priority") is not None
            else j.get("weight"), "submitted": str(j.get("submissionTime", ""))[:19].replace(
                "T", " "), "slots": f"{j.get('allocatedSlots', 0)}/{j.get('requestedSlots', 0)}",
            "state": state, "why": wait_reason(j), "user": j.get("username", ""),
            "pool": j.get("resourcePool", ""),
            "experiment": int(j["entityId"]) if kind == "experiment" else None,
            "weight": j.get("weight"), "job_name": j["name"],
            "exp_state": state_text(j.get("experimentState"))}))
    return rows


def job_state(job: dict[str, Any]) -> str:
    """The queue's state, except where the experiment says more: a paused experiment's job is
    PAUSED (not QUEUED), a stopping one's STOPPING_CANCELED etc. (not SCHEDULED); a job that
    waits says why."""
    state = state_text((job.get("summary") or {}).get("state"))
    experiment = state_text(job.get("experimentState"))
    if experiment and experiment != "ACTIVE":
        state = experiment
    if job.get("unschedulableReason") and state == "QUEUED" and not job.get("waitReason"):
        state += f" ({job['unschedulableReason']})"  # (a master that words no waitReason)
    return state


def wait_reason(job: dict[str, Any]) -> str:
    """Why the job waits, as the master's last scheduling pass found; "" if it does not. A
    reason longer than WHY_CAP is cut with "…"."""
    why = str(job.get("waitReason") or "")
    return why if len(why) <= WHY_CAP else why[:WHY_CAP - 1] + "…"


def why_line(key: str | None, row: dict[str, Any] | None) -> str:
    """The line under the table: why the selected job waits."""
    if key is None or row is None or not row.get("why"):
        return ""
    return f"Job {key[:8]} waits: {row['why']}"


def wrapped(line: str, width: int, console: Console, lines: int = WHY_LINES) -> Text:
    """`line` as plain text wrapped at word boundaries to `width` cells, in at most `lines`
    lines: what does not fit is cut with "…", never silently."""
    if not line:
        return Text("")
    width = max(width, 2)
    rows = list(plain(line).wrap(console, width, overflow="fold"))
    if len(rows) > lines:
        last = rows[lines - 1]
        last.truncate(width - 1)
        last.rstrip()
        rows = [*rows[:lines - 1], last + Text("…")]
    return Text("\n").join(rows)


class QueueScreen(ApiScreen):
    TABLE = "#jobs"
    BINDINGS: ClassVar[list[BindingType]] = [  # most used first: the footer shows a prefix
        Binding("K", "move_up", "Move up"),
        Binding("J", "move_down", "Move down"),
        Binding("P", "set_priority", "Priority"),
        Binding("slash", "filter", "Filter"),
        Binding("p", "control('pause')", "Pause"),
        Binding("a", "control('activate')", "Activate"),
        Binding("c", "control('cancel')", "Cancel…"),
        Binding("x", "control('kill')", "Kill…"),
        Binding("s", "sort_next", "Sort"),
        Binding("r", "sort_reverse", "Reverse"),
        Binding("W", "set_weight", "Weight"),
        Binding("o", "set_pool", "Pool"),
        Binding("M", "more_rows", "More rows"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    DEFAULT_CSS = """
    QueueScreen RowTable { height: 1fr; }
    QueueScreen #title { background: $boost; padding: 0 1; text-style: bold; }
    QueueScreen #why { height: auto; max-height: 3; padding: 0 1; color: $warning; }
    """

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain("Job queue", id="title")
        yield self.filter_box()
        yield RowTable(COLUMNS, id="jobs")
        yield Plain("", id="why")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(RowTable).focus()
        self.run_feed()

    @work(exclusive=True, group="feed")
    async def run_feed(self) -> None:  # type: ignore[override]
        await self.feed(self.windowed("jobs"), self.table, job_rows)

    def on_feed(self, topic: str) -> None:
        self.view_changed()
        self.show_why()

    @on(RowTable.CursorMoved)
    def _maybe_more(self, _: RowTable.CursorMoved) -> None:
        self.show_why()
        if self.at_end():
            self.action_more_rows()

    def show_why(self) -> None:
        """The selected job's reason under the table, wrapped to up to WHY_LINES lines (at
        80x24 the column is left out: this line is where the reason is read)."""
        key = self.table.cursor_key
        why = self.query_one("#why", Static)
        width = why.content_region.width or self.app.size.width - 2
        why.update(wrapped(why_line(key, self.table.row(key) if key else None), width,
                           self.app.console))

    def on_resize(self, _: events.Resize) -> None:
        self.call_after_refresh(self.show_why)

    def view_changed(self) -> None:
        t = self.table
        sort = f", sorted by {t.sort_column}{' ↓' if t.sort_reverse else ''}" \
            if t.sort_column else ""
        where = f", filter {t.filter_text!r}" if t.filter_text else ""
        self.show("#title", f"Job queue: {counted(t, 'job')}{sort}{where}",
                  self.more_text("jobs"))

    # -- selection --------------------------------------------------------------------------

    def _selected(self) -> tuple[str, dict[str, Any]] | None:
        key = self.table.cursor_key
        row = self.table.row(key) if key else None
        if key is None or row is None:
            self.notify("no job selected", severity="warning")
            return None
        return key, row

    async def _update(self, what: str, job_id: str, done: str, **change: Any) -> None:
        """`Client.update_job(job_id, **change)`, reported as `what`, then `done`."""
        await self.call(what, lambda: self.client.update_job(job_id, **change), done=done)

    # -- actions ----------------------------------------------------------------------------

    async def _move(self, up: bool) -> None:
        selected = self._selected()
        if selected is None:
            return
        key, _ = selected
        order = self.table.keys_in_view_order
        i = order.index(key)
        j = i - 1 if up else i + 1
        if not 0 <= j < len(order):
            self.notify("already at the " + ("top" if up else "bottom"), severity="warning")
            return
        anchor = "ahead_of" if up else "behind_of"
        way = "up" if up else "down"
        await self._update(f"move job {key[:8]} {way}", key, f"job {key[:8]} moved {way}",
                           **{anchor: order[j]})

    async def action_move_up(self) -> None:
        await self._move(True)

    async def action_move_down(self) -> None:
        await self._move(False)

    @work(group="dialog")
    async def action_set_priority(self) -> None:
        selected = self._selected()
        if selected is None:
            return
        key, row = selected
        answer = await self.ask(f"Priority for job {key[:8]} (1-99, lower runs first)",
                                str(row.get("priority") or ""))
        if answer:
            try:
                value = int(answer)
            except ValueError:
                self.notify(f"priority: expected a whole number, got {answer!r}",
                            severity="error")
                return
            await self._update(f"set the priority of job {key[:8]} to {value}", key,
                               f"job {key[:8]}: priority {value}", priority=value)

    @work(group="dialog")
    async def action_set_weight(self) -> None:
        selected = self._selected()
        if selected is None:
            return
        key, row = selected
        answer = await self.ask(f"Weight for job {key[:8]} (fair share)",
                                str(row.get("weight") or ""))
        if answer:
            try:
                value = float(answer)
            except ValueError:
                self.notify(f"weight: expected a number, got {answer!r}", severity="error")
                return
            await self._update(f"set the weight of job {key[:8]} to {value:g}", key,
                               f"job {key[:8]}: weight {value:g}", weight=value)

    @work(group="dialog")
    async def action_set_pool(self) -> None:
        selected = self._selected()
        if selected is None:
            return
        key, row = selected
        answer = await self.ask(f"Resource pool for job {key[:8]}", str(row.get("pool") or ""))
        if answer:
            await self._update(f"move job {key[:8]} to pool {answer}", key,
                               f"job {key[:8]} moved to pool {answer}", resource_pool=answer)

    @work(group="dialog")
    async def action_control(self, verb: str) -> None:
        selected = self._selected()
        if selected is None:
            return
        row = selected[1]
        exp_id = row.get("experiment")
        if exp_id is None:
            self.notify("only experiments can be controlled", severity="warning")
            return
        await self.control(int(exp_id), verb, str(row.get("job_name") or ""),
                           str(row.get("exp_state") or ""))

    def action_open(self) -> None:
        selected = self._selected()
        if selected is not None and selected[1].get("experiment") is not None:
            from dettui.screens.experiment import ExperimentScreen

            self.app.push_screen(ExperimentScreen(int(selected[1]["experiment"])))

    @on(RowTable.Selected)
    def _selected_row(self, _: RowTable.Selected) -> None:
        self.action_open()
