"""Determined's pagination (`master/internal/api/params.go`), for lists the store reads a page
of with `LIMIT ? OFFSET ?` after a `COUNT(*)`, and for lists built in memory."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dettui.errors import InvalidArgument

T = TypeVar("T")
ORDERS = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")


@dataclass(frozen=True)
class Page:
    """What a list request asks for: `offset` (from the end if negative), `limit` (0: all),
    and whether the order is reversed (ORDER_BY_DESC)."""

    offset: int = 0
    limit: int = 0
    desc: bool = False

    def window(self, total: int) -> Window:
        start = total + self.offset if self.offset < 0 else self.offset
        if start < 0 or start > total:
            raise InvalidArgument("offset out of bounds")
        end = total if self.limit <= 0 else min(start + self.limit, total)
        return Window(self, start, end, total)


@dataclass(frozen=True)
class Window:
    """The rows [start, end) of `total`."""

    page: Page
    start: int
    end: int
    total: int

    def pagination(self) -> dict[str, int]:
        return {"offset": self.page.offset, "limit": self.page.limit, "startIndex": self.start,
                "endIndex": self.end, "total": self.total}

    def of(self, items: Sequence[T]) -> list[T]:
        return list(items[self.start:self.end])


def order_of(value: str | None) -> bool:
    """Whether an `orderBy` asks for descending order (unknown values are refused)."""
    if value and value not in ORDERS:
        raise InvalidArgument(f"orderBy: unknown value {value[:40]!r}; one of "
                              f"{', '.join(ORDERS)}")
    return value == "ORDER_BY_DESC"


def read(conn: sqlite3.Connection, page: Page, count_sql: str, rows_sql: str,
         args: Sequence[Any]) -> tuple[list[sqlite3.Row], Window]:
    """`count_sql` counts every matching row, `rows_sql` (ordered, without LIMIT) selects
    them: the page's rows (read with LIMIT/OFFSET, an index walk for an indexed order) and
    its window."""
    total = int(conn.execute(count_sql, args).fetchone()[0])
    window = page.window(total)
    if window.end <= window.start:
        return [], window
    rows = conn.execute(f"{rows_sql} LIMIT ? OFFSET ?",
                        (*args, window.end - window.start, window.start)).fetchall()
    return rows, window
