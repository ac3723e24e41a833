"""Agent credentials: secrets an admin issues for agents (never a user's token). Each is bound
to the agent id that first registers with it, and is kept by its SHA-256 only."""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass

from dettui.errors import NotFound, PermissionDenied
from dettui.master.store.tx import transaction
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


def issue(conn: sqlite3.Connection, created_by: int | None, description: str = "",
          agent_id: str | None = None) -> tuple[AgentCredential, str]:
    """A new credential and its secret (shown once, never stored)."""
    secret = PREFIX + secrets.token_urlsafe(32)
    with transaction(conn):
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


def bind(conn: sqlite3.Connection, cred_id: int, agent_id: str) -> AgentCredential:
    """The agent registering with a credential: the first one owns it from then on."""
    with transaction(conn):
        cred = get(conn, cred_id)
        if cred.agent_id is None:
            conn.execute("UPDATE agent_credentials SET agent_id=? WHERE id=?", (agent_id, cred_id))
        elif cred.agent_id != agent_id:
            raise PermissionDenied(f"this agent credential belongs to agent {cred.agent_id}, "
                                   f"not {agent_id}")
        return get(conn, cred_id)


def list_(conn: sqlite3.Connection) -> list[AgentCredential]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM agent_credentials ORDER BY id")
    return [AgentCredential.from_row(r) for r in rows]


def revoke(conn: sqlite3.Connection, cred_id: int) -> AgentCredential:
    with transaction(conn):
        if conn.execute("UPDATE agent_credentials SET revoked=1 WHERE id=?",
                        (cred_id,)).rowcount == 0:
            raise NotFound(f"agent credential {cred_id} not found")
        return get(conn, cred_id)
