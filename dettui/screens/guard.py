"""A screen's handlers may have bugs; the dashboard must outlive them. Every message a guarded
screen handles runs inside a guard that hands an exception to the app's `report_error` (a toast
and the log) instead of letting it end the screen's message loop, and with it the app."""

from __future__ import annotations

from textual.message import Message


class Guarded:
    """Mixin for Screens: exceptions in handlers are reported, and the screen goes on."""

    async def _dispatch_message(self, message: Message) -> None:
        try:
            await super()._dispatch_message(message)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - reported, never swallowed silently
            report = getattr(getattr(self, "app", None), "report_error", None)
            if report is None:
                raise
            report(exc)


def describe(exc: BaseException) -> str:
    """One line for a toast: the error's type and message."""
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}" if not hasattr(exc, "title") else text
