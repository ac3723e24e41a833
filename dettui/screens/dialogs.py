"""Modal dialogs: ask for a value, ask for a path (typed or picked in a tree), and confirm a
destructive action (`y` confirms; the dialog says what will happen)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DirectoryTree, Input

from dettui.screens.guard import Guarded
from dettui.widgets.safe import Plain, PlainInput, clean, plain


class PromptScreen(Guarded, ModalScreen[str | None]):
    """Ask for one value; Enter answers, Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical { width: 70; max-width: 100%; height: auto; border: thick $accent;
                              background: $surface; padding: 1 2; }
    PromptScreen Plain { width: 100%; }
    """

    def __init__(self, question: str, value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Plain(self.question)
            yield PlainInput(value=self.value, placeholder=self.placeholder, id="answer")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(self.answer_of(event.value.strip()))

    def answer_of(self, text: str) -> str:
        """The answer to the text in the box."""
        return text

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(Guarded, ModalScreen[bool]):
    """Say what an action will do; `y` does it, `n` or Escape keeps things as they are."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes, do it"),
        Binding("n,escape", "answer(False)", "No, keep it", key_display="n/esc"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 72; max-width: 100%; height: auto;
                               border: thick $error; background: $surface; padding: 1 2; }
    ConfirmScreen #question { text-style: bold; margin-bottom: 1; }
    ConfirmScreen #keys { margin-top: 1; color: $text-muted; }
    """

    def __init__(self, question: str, consequence: str, verb: str) -> None:
        super().__init__()
        self.question = question
        self.consequence = consequence
        self.verb = verb

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Plain(self.question, id="question")
            yield Plain(self.consequence, id="consequence", newlines=True)
            yield Plain(f"y: {self.verb}    n or Escape: no, keep it", id="keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class _Tree(DirectoryTree):
    """Directories, and the files `want` accepts; hidden entries and caches left out."""

    def __init__(self, path: Path, want: Callable[[Path], bool], **kw: Any) -> None:
        super().__init__(path, **kw)
        self.want = want

    def process_label(self, label: Any) -> Text:
        """File names are shown as they are: no markup, no control characters."""
        return super().process_label(plain(label.plain if isinstance(label, Text) else label))

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
        # A path given or picked, as its box shows it (printable) -> the path itself.
        self.picked: dict[str, str] = {clean(value): value}
        self.want = want if files else (lambda _: False)

    def compose(self) -> ComposeResult:
        start = Path(self.value or ".").expanduser()
        root = start if _is_dir(start) else start.parent
        with Vertical():
            yield Plain(self.question)
            yield PlainInput(value=self.value, id="answer")
            yield _Tree(root if _is_dir(root) else Path("."), self.want, id="tree")

    @on(DirectoryTree.FileSelected)
    def _file(self, event: DirectoryTree.FileSelected) -> None:
        if self.files:
            self._pick(event.path)
            self.query_one("#answer", Input).focus()

    @on(DirectoryTree.DirectorySelected)
    def _directory(self, event: DirectoryTree.DirectorySelected) -> None:
        if not self.files:
            self._pick(event.path)

    def _pick(self, path: Path) -> None:
        """Into the box as shown (printable); answered as it is, unless edited."""
        box = self.query_one("#answer", Input)
        box.value = str(path)
        self.picked[box.value] = str(path)

    def answer_of(self, text: str) -> str:
        return self.picked.get(text, text)
