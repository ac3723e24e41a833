"""A one-line banner across the top of a screen, hidden while it has nothing to say (e.g.
"master http://… unreachable since 16:03:12, retrying")."""

from __future__ import annotations

from dettui.widgets.safe import Plain


class Banner(Plain):
    """Shown (in the error colour) while it holds text; `say("")` hides it."""

    DEFAULT_CSS = """
    Banner { display: none; background: $error; color: $text; text-style: bold;
             padding: 0 1; height: auto; }
    Banner.shown { display: block; }
    """

    def say(self, text: str) -> None:
        self.update(text)
        self.set_class(bool(text), "shown")
