"""Every key of the dashboard, screen by screen, from the bindings themselves, each key shown as
it is typed (`?`, `/`, `ctrl+p`)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.keys import format_key
from textual.screen import ModalScreen

from dettui.screens.guard import Guarded
from dettui.widgets.safe import Plain, clean

_NAMES = {"escape": "esc", "enter": "enter", "space": "space", "tab": "tab"}


def key_label(binding: Binding) -> str:
    """The keys of a binding as a user types them: `?`, `/`, `ctrl+p`, `n/esc`."""
    if binding.key_display:
        return binding.key_display
    out = []
    for key in binding.key.split(","):
        *mods, name = key.strip().split("+")
        shown = _NAMES.get(name) or format_key(name)
        out.append("+".join([*mods, shown]))
    return "/".join(dict.fromkeys(out))


def describe_keys(*sources: tuple[str, list[BindingType]], note: Text | None = None) -> Text:
    text = Text()
    for title, bindings in sources:
        text.append(clean(title) + "\n", style="bold")
        for b in bindings:
            if isinstance(b, Binding):
                what = clean(b.tooltip or b.description or b.action)
                text.append(f"  {key_label(b):<14} {what}\n")
        text.append("\n")
    if note is not None:
        text.append_text(note)
    return text


class HelpScreen(Guarded, ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; max-width: 100%; height: 80%;
                                  border: thick $accent; background: $surface; padding: 1 2; }
    """

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Plain(self.text, id="help-text")

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
