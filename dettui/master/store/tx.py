"""Transactions: every store change commits before the call returns.

Tests can plan a simulated crash of the master at the N-th commit of a connection, before it
(the change rolls back) or after it (the change stays, nothing that follows runs); once it has
fired, every later transaction on that connection fails the same way, as a dead master would.

A failed statement or COMMIT leaves no transaction open: SQLite may already have rolled back
on its own (SQLITE_FULL does), and a ROLLBACK then would fail and hide the error that matters
(the store maps "disk full" by it); a COMMIT that failed and left the transaction open would
make every later BEGIN fail, long after space was freed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar


class SimulatedCrash(BaseException):
    """The master "died" at a planned commit. A BaseException: nothing may catch it as an
    ordinary error and carry on."""


@dataclass
class CrashPlan:
    at: int  # the commit number (1-based) to crash at; 0: never, only count
    after: bool  # crash just after that commit, else just before it
    commits: int = 0
    fired: bool = False
    trail: list[str] = field(default_factory=list, repr=False)  # the store function of each


class Connection(sqlite3.Connection):
    """The store's connection: a sqlite3 connection that can carry a test's crash plan."""

    dialect = "sqlite"
    crash_plan: CrashPlan | None = None

    def begin(self) -> None:
        self.execute("BEGIN IMMEDIATE")  # the write lock at once: no upgrade that can fail


_next: list[CrashPlan] = []  # for the next store opened (a master starting up)


def plan_crash_of_next_store(plan: CrashPlan) -> None:
    """The next store connection opened takes `plan` (commits counted from its very first)."""
    _next[:] = [plan]


def adopt_plan(conn: sqlite3.Connection) -> None:
    if _next and hasattr(conn, "crash_plan"):  # a tx.Connection or a pg.Connection
        conn.crash_plan = _next.pop()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    plan = getattr(conn, "crash_plan", None)
    if plan is not None and plan.fired:
        raise SimulatedCrash(f"the master died at commit {plan.at}")
    conn.begin()  # type: ignore[attr-defined]  # a tx.Connection or a pg.Connection
    try:
        yield conn
    except BaseException:
        _abandon(conn)
        raise
    if plan is not None:
        plan.commits += 1
        code = sys._getframe(2).f_code
        plan.trail.append(f"{code.co_filename.rsplit('/', 1)[-1][:-3]}.{code.co_name}")
        if plan.commits == plan.at and not plan.after:
            plan.fired = True
            conn.execute("ROLLBACK")
            raise SimulatedCrash(f"the master died just before commit {plan.at}")
    try:
        conn.execute("COMMIT")
    except BaseException:
        _abandon(conn)
        raise
    if plan is not None and plan.commits == plan.at:
        plan.fired = True
        raise SimulatedCrash(f"the master died just after commit {plan.at}")


def _abandon(conn: sqlite3.Connection) -> None:
    """Roll back what is left of a failed transaction, if anything is (see above)."""
    if getattr(conn, "in_transaction", True):  # PostgreSQL's connection: always try
        with contextlib.suppress(Exception):
            conn.execute("ROLLBACK")


F = TypeVar("F", bound=Callable[..., Any])


def command(fn: F) -> F:
    """Marks a store command: a state transition in one transaction of its own, returning its
    `Effects` (or `Done`: a value with them) for the dispatcher to perform after the commit.
    Callers outside the store run it with `Dispatcher.run`, never `Database.run` (which
    refuses it: its effects would be dropped)."""
    fn.store_command = True  # type: ignore[attr-defined]
    return fn


def step(fn: F) -> F:
    """Marks a building block of commands: it writes inside the transaction its caller holds
    and is called only from inside the store (and from tests)."""
    fn.store_step = True  # type: ignore[attr-defined]
    return fn
