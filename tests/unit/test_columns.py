"""How table columns share a width (widgets.columns.arrange): the highest priority numbers
are left out first (never a priority-0 column) until the rest fit with fitted columns at a
comfortable width; fitted columns then get what is spare."""

from __future__ import annotations

import pytest

from dettui.widgets.columns import Column, arrange

COLUMNS = [Column("id", "ID", width=4), Column("name", "Name"),
           Column("state", "State", width=10), Column("user", "User", width=12, priority=2),
           Column("pool", "Pool", width=10, priority=3), Column("when", "When", width=19,
                                                              priority=4)]
WANTED = [4, 30, 10, 12, 10, 19]  # total with gaps: 85 + 10 = 95


@pytest.mark.parametrize(("room", "widths"), [
    (None, [4, 30, 10, 12, 10, 19]),  # not laid out yet: everything as wanted
    (95, [4, 30, 10, 12, 10, 19]),  # room for all
    (80, [4, 30, 10, 12, 10, 0]),  # When goes; Name gets back what is spare
    (60, [4, 28, 10, 12, 0, 0]),  # then Pool
    (44, [4, 26, 10, 0, 0, 0]),  # then User; never the priority-0 ones
    (20, [4, 10, 10, 0, 0, 0]),  # too narrow even for those: floors, the table scrolls
])
def test_the_least_important_columns_give_way_first(room: int | None,
                                                    widths: list[int]) -> None:
    assert arrange(COLUMNS, WANTED, room) == widths


def test_priorities_are_not_negative() -> None:
    with pytest.raises(ValueError, match="priority"):
        Column("x", "X", priority=-1)
