"""Agent credentials: secrets an admin issues for agents (never a user's token), kept by their
SHA-256 only.

The binding is two-way. A credential belongs to the agent id it first registers as (or is
issued for), and an agent id to at most one live credential: a second credential registering
under a bound id is refused, naming the credential that holds it, so no one can take over an
agent by joining under its name. The binding is a column of the credential, written in the
same transaction as the registration (`agents.register`), so it outlives master restarts; a
unique index over live credentials backs it. Revoking a credential frees its id: an admin who
lost an agent's secret revokes it and issues a new one, and the agent joins again under the
same id. The master's own embedded agent gets a fresh credential at every start; the start
revokes the master's earlier ones for that id (`issue_for_master`)."""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass

from dettui.errors import NotFound, PermissionDenied
from dettui.master.effects import Done
from dettui.master.store.tx import command, step, transaction
from dettui.master.store.users import token_hash

PREFIX = "dettui-agent-"  # tells an agent credential from a user's session token


COLUMNS = "id, description, agent_id, created_at, revoked"


@dataclass(frozen=True)
class AgentCredential:
    id: int
    description: str
    agent_id: str | None  # None until an agent registers with it
    created_at: float
    revoked: bool

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> AgentCredential:
        return cls(r["id"], r["description"], r["agent_id"], r["created_at"], bool(r["revoked"]))


@command
def issue(conn: sqlite3.Connection, created_by: int | None, description: str = "",
          agent_id: str | None = None) -> Done[tuple[AgentCredential, str]]:
    """A new credential and its secret (shown once, never stored); bound to `agent_id` at once
    when given, which no other live credential may hold."""
    with transaction(conn):
        return Done(_insert(conn, created_by, description, agent_id))


@command
def issue_for_master(conn: sqlite3.Connection, agent_id: str,
                     description: str) -> Done[tuple[AgentCredential, str]]:
    """A credential for an agent the master runs itself (`dettui serve`'s local agent): the
    master's earlier credentials for `agent_id` are revoked in the same transaction, so a
    restarted master's agent takes its id back. One an admin issued is not: it still holds the
    id, and this is refused with its number."""
    with transaction(conn):
        conn.execute("UPDATE agent_credentials SET revoked=1 WHERE agent_id=? AND revoked=0 "
                     "AND created_by IS NULL", (agent_id,))
        return Done(_insert(conn, None, description, agent_id))


def _insert(conn: sqlite3.Connection, created_by: int | None, description: str,
            agent_id: str | None) -> tuple[AgentCredential, str]:
    if agent_id is not None:
        _refuse_if_held(conn, agent_id, None)
    secret = PREFIX + secrets.token_urlsafe(32)
    row = conn.execute(
        "INSERT INTO agent_credentials (token_hash, description, agent_id, created_by, "
        "created_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
        (token_hash(secret), description, agent_id, created_by, time.time())).fetchone()
    return get(conn, int(row[0])), secret


def get(conn: sqlite3.Connection, cred_id: int) -> AgentCredential:
    row = conn.execute(f"SELECT {COLUMNS} FROM agent_credentials WHERE id=?", (cred_id,)).fetchone()
    if row is None:
        raise NotFound(f"agent credential {cred_id} not found")
    return AgentCredential.from_row(row)


def holder(conn: sqlite3.Connection, agent_id: str) -> AgentCredential | None:
    """The live credential bound to `agent_id`, if any (there is at most one)."""
    row = conn.execute(f"SELECT {COLUMNS} FROM agent_credentials WHERE agent_id=? AND revoked=0",
                       (agent_id,)).fetchone()
    return None if row is None else AgentCredential.from_row(row)


def _refuse_if_held(conn: sqlite3.Connection, agent_id: str, cred_id: int | None) -> None:
    held = holder(conn, agent_id)
    if held is not None and held.id != cred_id:
        raise PermissionDenied(
            f"agent id {agent_id} is bound to agent credential {held.id}: only the agent "
            f"holding that credential may register as {agent_id}. If that agent's secret is "
            f"lost, an admin revokes the credential (`dettui agent token revoke {held.id}`) "
            "and issues a new one")


@step
def bind(conn: sqlite3.Connection, cred_id: int, agent_id: str) -> AgentCredential:
    """The agent registering with a credential: the first id it registers as owns it from then
    on, and an id already bound to another live credential is refused. Call it inside the
    transaction that records the registration."""
    cred = get(conn, cred_id)
    if cred.revoked:
        raise PermissionDenied(f"agent credential {cred_id} is revoked")
    if cred.agent_id is not None and cred.agent_id != agent_id:
        raise PermissionDenied(f"this agent credential belongs to agent {cred.agent_id}, "
                               f"not {agent_id}")
    _refuse_if_held(conn, agent_id, cred_id)
    if cred.agent_id is None:
        conn.execute("UPDATE agent_credentials SET agent_id=? WHERE id=?", (agent_id, cred_id))
        return get(conn, cred_id)
    return cred


def list_(conn: sqlite3.Connection) -> list[AgentCredential]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM agent_credentials ORDER BY id")
    return [AgentCredential.from_row(r) for r in rows]


@command
def revoke(conn: sqlite3.Connection, cred_id: int) -> Done[AgentCredential]:
    """Revoke a credential: refused from its next request on, and its agent id is free for a
    new credential."""
    with transaction(conn):
        if conn.execute("UPDATE agent_credentials SET revoked=1 WHERE id=?",
                        (cred_id,)).rowcount == 0:
            raise NotFound(f"agent credential {cred_id} not found")
        return Done(get(conn, cred_id))
