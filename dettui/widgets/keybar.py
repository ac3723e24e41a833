"""A footer that fits its width: keys in order of importance (the focused widget's, then the
screen's in the order it lists them, then the app's), as many as fit, with help (`?`) and quit
always there. The others stay one keypress away: in help and in the command palette."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

KEPT = ("help", "quit")  # actions always shown
PALETTE = 14  # cells the command palette's key takes on the right


class KeyBar(Footer):
    def __init__(self, **kw: Any) -> None:
        super().__init__(compact=True, **kw)

    def _fitting(self) -> Iterator[tuple[Binding, bool, str]]:
        seen: set[str] = set()
        items = []
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in seen:
                seen.add(binding.action)
                items.append((binding, enabled, tooltip))
        room = (self.size.width or self.app.size.width) - PALETTE
        room -= sum(self._cost(b) for b, _, _ in items if b.action in KEPT)
        chosen = set()
        for binding, _, _ in items:
            if binding.action in KEPT:
                continue
            if self._cost(binding) > room:
                break
            room -= self._cost(binding)
            chosen.add(binding.action)
        return (item for item in items if item[0].action in chosen or item[0].action in KEPT)

    def _cost(self, binding: Binding) -> int:
        return cell_len(self.app.get_key_display(binding)) + cell_len(binding.description) + 2

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        for binding, enabled, tooltip in self._fitting():
            yield FooterKey(binding.key, self.app.get_key_display(binding),
                            binding.description, binding.action, disabled=not enabled,
                            tooltip=tooltip).data_bind(compact=Footer.compact)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _, binding, enabled, tooltip = found
                yield FooterKey(binding.key, self.app.get_key_display(binding),
                                binding.description, binding.action,
                                classes="-command-palette", disabled=not enabled,
                                tooltip=binding.tooltip or binding.description)

    def on_resize(self) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self.recompose)
