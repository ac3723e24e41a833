"""The master's store: SQLite in WAL mode behind one thread; functions grouped by resource."""

from dettui.master.store.db import Database

__all__ = ["Database"]
