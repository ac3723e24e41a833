"""Quitting with work running: leave the master in the background, stop everything (running
trials checkpoint first), or stay. And the progress of stopping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen

from dettui.screens.guard import Guarded
from dettui.widgets.safe import Plain

BACKGROUND, STOP = "background", "stop"


@dataclass(frozen=True)
class Work:
    """What runs on a master: trials (allocations) running, and on which agents; jobs waiting."""

    running: int
    remote: tuple[str, ...]  # agents other than the local one that run trials
    remote_trials: int
    waiting: int

    @property
    def any(self) -> bool:
        return bool(self.running or self.waiting)

    def summary(self) -> str:
        parts = []
        if self.running:
            text = f"{self.running} trial{'s' if self.running != 1 else ''} running"
            if self.remote_trials:
                text += (f" ({self.remote_trials} of them on other machines: "
                         f"{', '.join(self.remote)})")
            parts.append(text)
        if self.waiting:
            parts.append(f"{self.waiting} job{'s' if self.waiting != 1 else ''} waiting")
        return ", ".join(parts) or "nothing running"


def work_of(tasks: list[dict[str, Any]], jobs: list[dict[str, Any]], local_agent: str) -> Work:
    """From GET /api/v1/tasks' summaries and the job queue."""
    remote: dict[str, int] = {}
    for task in tasks:
        agents = {str(r.get("agentId")) for r in task.get("resources") or []}
        for agent in agents - {local_agent}:
            remote[agent] = remote.get(agent, 0) + 1
    remote_trials = sum(1 for t in tasks if {str(r.get("agentId")) for r in
                                             t.get("resources") or []} - {local_agent})
    waiting = sum(1 for j in jobs
                  if str((j.get("summary") or {}).get("state", "")).endswith("QUEUED"))
    return Work(len(tasks), tuple(sorted(remote)), remote_trials, waiting)


class QuitScreen(Guarded, ModalScreen[str | None]):
    """Work is running: `b` background, `s` stop everything, Escape stays."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", f"choose('{BACKGROUND}')", "Leave it running in the background"),
        Binding("s", f"choose('{STOP}')", "Stop everything (trials checkpoint first)"),
        Binding("escape", "choose('')", "Stay"),
    ]
    DEFAULT_CSS = """
    QuitScreen { align: center middle; }
    QuitScreen > Vertical { width: 76; max-width: 100%; height: auto; border: thick $warning;
                            background: $surface; padding: 1 2; }
    QuitScreen #quit-title { text-style: bold; margin-bottom: 1; }
    QuitScreen .choice { margin-top: 1; }
    """

    def __init__(self, work: Work, url: str, pid: int) -> None:
        super().__init__()
        self.work, self.url, self.pid = work, url, pid

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Plain(f"Work is running on this master: {self.work.summary()}.",
                        id="quit-title")
            yield Plain(f"b  leave it running in the background: the master and its agent go "
                        f"on (pid {self.pid}, {self.url}); `dettui` attaches to it again, "
                        "`dettui serve --stop` stops it", classes="choice")
            yield Plain("s  stop everything: running trials checkpoint and stop (they resume "
                        "when the master runs again), then the master exits", classes="choice")
            yield Plain("esc  stay in the dashboard", classes="choice")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice or None)


def stopping_text(running: int) -> str:
    """What the stopping dialog says while trials are still running."""
    return (f"Stopping: {running} trial{'s' if running != 1 else ''} still checkpointing and "
            "stopping, then the master exits…")


class StoppingScreen(Guarded, ModalScreen[None]):
    """Shown while the master stops; the app updates the line."""

    DEFAULT_CSS = """
    StoppingScreen { align: center middle; }
    StoppingScreen > Vertical { width: 76; max-width: 100%; height: auto;
                                border: thick $warning; background: $surface; padding: 1 2; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Plain("Stopping: running trials checkpoint and stop, then the master exits…",
                        id="stopping")

    def progress(self, text: str) -> None:
        self.query_one("#stopping", Plain).update(text)
