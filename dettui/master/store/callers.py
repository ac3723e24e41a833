"""Who a token belongs to, remembered between requests.

Every API request names its caller by a token: a user's session, an agent's credential, or a
trial's allocation token. Looking one up was a store call per request, and on the single store
thread each waited behind creations, exits and metric batches (10 ms on average, 400 ms at p99
while 100 agents ran trials), before the request's own work had even begun.

So the store's own SQLite connection remembers each caller it has read, and temporary
triggers on that connection forget one in the statement that changes it: a session ended
(logout, expiry swept, a user deactivated), a user changed, a credential bound or revoked, an
allocation's state or flags changed, an experiment given another owner. Reads and forgets both
run on the store thread, in order, so an entry read before a change is always forgotten by
it; the event loop only looks entries up. A rolled-back change forgets too, which costs one
read again. Sessions keep their expiry and are checked against the clock at each use.

A session knows whether it is a trial's DET_USER_TOKEN (`Session.allocation_id`): the owner's
session a trial holds while it runs, which the middleware lets do less than a login's.

PostgreSQL has no per-connection triggers here: there nothing is remembered (`watch` gives
None) and every request reads its caller, as before.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field

from dettui.master.store import trials
from dettui.master.store.credentials import COLUMNS as CREDENTIAL_COLUMNS
from dettui.master.store.credentials import AgentCredential
from dettui.master.store.records import Allocation, User, columns
from dettui.master.store.users import token_hash
from dettui.models import AllocationState

MAX = 20_000  # entries of one kind; beyond it that kind starts afresh (only real callers get in)
_TRIGGERS = (
    "AFTER UPDATE ON main.users BEGIN SELECT dettui_callers('users', NULL); END",
    "AFTER DELETE ON main.users BEGIN SELECT dettui_callers('users', NULL); END",
    "AFTER UPDATE ON main.user_sessions "
    "BEGIN SELECT dettui_callers('session', OLD.token_hash); END",
    "AFTER DELETE ON main.user_sessions "
    "BEGIN SELECT dettui_callers('session', OLD.token_hash); END",
    "AFTER UPDATE ON main.agent_credentials "
    "BEGIN SELECT dettui_callers('agent', OLD.token_hash); END",
    "AFTER DELETE ON main.agent_credentials "
    "BEGIN SELECT dettui_callers('agent', OLD.token_hash); END",
    "AFTER UPDATE ON main.allocations BEGIN SELECT dettui_callers('task', OLD.token); END",
    "AFTER DELETE ON main.allocations BEGIN SELECT dettui_callers('task', OLD.token); END",
    "AFTER UPDATE OF owner_id ON main.experiments BEGIN SELECT dettui_callers('tasks', NULL); END",
    "AFTER UPDATE OF experiment_id ON main.trials BEGIN SELECT dettui_callers('tasks', NULL); END",
)


@dataclass(frozen=True)
class Session:
    """A user's unexpired session; `allocation_id` is set for a trial's DET_USER_TOKEN (the
    allocation it ends with), None for a login's."""

    user: User
    allocation_id: str | None = None


@dataclass
class Callers:
    """Callers read, by the hash of their token. Written on the store thread only; the event
    loop reads (a dict lookup is atomic)."""

    users: dict[str, tuple[Session, float]] = field(default_factory=dict)  # with the expiry
    agents: dict[str, AgentCredential] = field(default_factory=dict)
    tasks: dict[str, tuple[Allocation, User]] = field(default_factory=dict)

    def forget(self, kind: str, key: str | None) -> None:
        if kind == "users":  # a user changed: every session, and every task's owner
            self.users.clear()
            self.tasks.clear()
        elif kind == "session":
            self.users.pop(key or "", None)
        elif kind == "agent":
            self.agents.pop(key or "", None)
        elif kind == "task":
            self.tasks.pop(key or "", None)
        elif kind == "tasks":
            self.tasks.clear()

    def user(self, token: str) -> User | None:
        """A remembered user with an unexpired session, else None (read it from the store)."""
        found = self.session(token)
        return found.user if found is not None else None

    def session(self, token: str) -> Session | None:
        """A remembered unexpired session, else None (read it from the store)."""
        hit = self.users.get(token_hash(token))
        return hit[0] if hit is not None and hit[1] > time.time() else None

    def agent(self, secret: str) -> AgentCredential | None:
        return self.agents.get(token_hash(secret))

    def task(self, token: str) -> tuple[Allocation, User] | None:
        return self.tasks.get(token_hash(token))


def watch(conn: sqlite3.Connection) -> Callers | None:
    """Remember callers read on `conn` from now on, forgetting each as a statement on `conn`
    changes it; None on PostgreSQL (nothing remembered)."""
    if getattr(conn, "dialect", "sqlite") != "sqlite":
        return None
    known = Callers()
    conn.create_function("dettui_callers", 2, known.forget)
    for n, body in enumerate(_TRIGGERS):
        conn.execute(f"DROP TRIGGER IF EXISTS temp.dettui_callers_{n}")
        conn.execute(f"CREATE TEMP TRIGGER dettui_callers_{n} {body}")
    return known


def _keep(kept: dict[str, object], key: str, value: object) -> None:
    if len(kept) >= MAX:
        kept.clear()
    kept[key] = value


def user(conn: sqlite3.Connection, known: Callers | None, token: str) -> User | None:
    """The user of an unexpired session (remembered, if `known`)."""
    found = session(conn, known, token)
    return found.user if found is not None else None


def session(conn: sqlite3.Connection, known: Callers | None, token: str) -> Session | None:
    """An unexpired session, with its user and whether a trial holds it (remembered, if
    `known`)."""
    key = token_hash(token)
    row = conn.execute(
        f"SELECT {columns(User.COLUMNS, 'u')}, s.expires_at, s.allocation_id "
        "FROM user_sessions s JOIN users u ON u.id = s.user_id "
        "WHERE s.token_hash=? AND s.expires_at > ?", (key, time.time())).fetchone()
    if row is None:
        return None
    found = Session(User.from_row(row), row["allocation_id"])
    if known is not None:
        _keep(known.users, key, (found, float(row["expires_at"])))  # type: ignore[arg-type]
    return found


def agent(conn: sqlite3.Connection, known: Callers | None,
          secret: str) -> AgentCredential | None:
    """The agent credential of `secret`, unless revoked (remembered, if `known`)."""
    key = token_hash(secret)
    row = conn.execute(f"SELECT {CREDENTIAL_COLUMNS} FROM agent_credentials "
                       "WHERE token_hash=? AND revoked=0", (key,)).fetchone()
    if row is None:
        return None
    found = AgentCredential.from_row(row)
    if known is not None:
        _keep(known.agents, key, found)  # type: ignore[arg-type]
    return found


def task(conn: sqlite3.Connection, known: Callers | None,
         token: str) -> tuple[Allocation, User] | None:
    """The allocation a task token belongs to, unless it has exited, with the user who owns
    its experiment (remembered, if `known`)."""
    key = token_hash(token)
    alloc = trials.allocation_by_token(conn, token)
    if alloc is None or alloc.state is AllocationState.EXITED:
        return None
    row = conn.execute(
        f"SELECT {columns(User.COLUMNS, 'u')} FROM trials t "
        "JOIN experiments e ON e.id = t.experiment_id "
        "JOIN users u ON u.id = e.owner_id WHERE t.id=?",
        (alloc.trial_id,),
    ).fetchone()
    found = alloc, User.from_row(row)
    if known is not None:
        _keep(known.tasks, key, found)  # type: ignore[arg-type]
    return found


def ended_task(conn: sqlite3.Connection, token: str) -> str | None:
    """Why a task token no longer works, if it was an allocation's that has ended (its trial's
    processes may still be stopping and calling): which allocation, how it ended, and whether
    its agent has been disabled since. None if the token never was an allocation's."""
    alloc = trials.allocation_by_token(conn, token)
    if alloc is None or alloc.state is not AllocationState.EXITED:
        return None
    row = conn.execute("SELECT enabled FROM agents WHERE id=?", (alloc.agent_id,)).fetchone()
    how = f"agent {alloc.agent_id} was disabled" if row is not None and not row[0] \
        else (alloc.exit_reason or "exited")
    return (f"invalid credentials: allocation {alloc.id} has ended ({how}); this trial's "
            "token no longer works and its processes are being stopped")
