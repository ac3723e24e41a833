"""Every key of the dashboard, screen by screen, from the bindings themselves."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def describe_keys(*sources: tuple[str, list[BindingType]]) -> str:
    lines = []
    for title, bindings in sources:
        lines.append(f"[b]{title}[/b]")
        for b in bindings:
            if isinstance(b, Binding):
                key = b.key_display or b.key
                lines.append(f"  {key:<14} {b.description or b.action}")
        lines.append("")
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; height: 80%; border: thick $accent;
                                  background: $surface; padding: 1 2; }
    """

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text, id="help-text")

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
