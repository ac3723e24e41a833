"""Registered agents (kept so a restarted master knows its cluster). An agent registers with
its credential, and the credential's binding to the agent id is written in the same
transaction as the agent's row (`credentials` says what the binding allows)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from dettui.errors import NotFound
from dettui.master.effects import Done, Effects, notify
from dettui.master.store import credentials, exits
from dettui.master.store.records import Agent, columns
from dettui.master.store.trials import live_allocations_of
from dettui.master.store.tx import command, transaction

FROM_AGENTS = f"SELECT {columns(Agent.COLUMNS)} FROM agents"


@command
def register(
    conn: sqlite3.Connection, cred_id: int | None, agent_id: str, pool: str,
    slots: list[dict[str, Any]], hostname: str, addresses: list[str],
) -> Done[Agent]:
    """Record an agent's registration: with `cred_id`, the credential it registers with is
    bound to `agent_id` (or refused) in the same transaction; None for the master's own pools
    (Slurm), which no credential speaks for."""
    with transaction(conn):
        if cred_id is not None:
            credentials.bind(conn, cred_id, agent_id)
        conn.execute(
            "INSERT INTO agents (id, pool, slots, hostname, addresses, registered_time) "
            "VALUES (?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET pool=excluded.pool, "
            "slots=excluded.slots, hostname=excluded.hostname, addresses=excluded.addresses, "
            "registered_time=excluded.registered_time",
            (agent_id, pool, json.dumps(slots), hostname, json.dumps(addresses), time.time()),
        )
    return Done(get(conn, agent_id))


def get(conn: sqlite3.Connection, agent_id: str) -> Agent:
    row = conn.execute(f"{FROM_AGENTS} WHERE id=?", (agent_id,)).fetchone()
    return Agent.from_row(row)


def list_(conn: sqlite3.Connection) -> list[Agent]:
    return [Agent.from_row(r) for r in conn.execute(f"{FROM_AGENTS} ORDER BY id")]


@command
def cluster_value(conn: sqlite3.Connection, key: str, default: str) -> Done[str]:
    """A persistent cluster-wide value (cluster id), created with `default` the first time."""
    with transaction(conn):
        conn.execute("INSERT INTO cluster (key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                     (key, default))
    return Done(str(conn.execute("SELECT value FROM cluster WHERE key=?",
                                 (key,)).fetchone()[0]))


@command
def set_enabled(conn: sqlite3.Connection, agent_id: str, enabled: bool,
                drain: bool = False) -> Done[Agent]:
    """Enable (and stop draining), or disable, draining or not. As in Determined, disabling
    without draining ends the agent's running trials (they go back to the queue), in the same
    commit."""
    lost = Effects()
    with transaction(conn):
        conn.execute("UPDATE agents SET enabled=?, draining=? WHERE id=?",
                     (int(enabled), int(drain and not enabled), agent_id))
        if not enabled and not drain:
            for alloc in live_allocations_of(conn, agent_id):
                if agent_id not in alloc.part_exits:
                    lost |= exits.lose_in(conn, alloc.id, f"agent {agent_id} disabled")
    return Done(get(conn, agent_id), lost | notify("agents") | Effects(kick=True))


@command
def set_slot_enabled(conn: sqlite3.Connection, agent_id: str, slot_id: int,
                     enabled: bool) -> Done[Agent]:
    """`det slot enable|disable`: no new work on a disabled slot."""
    with transaction(conn):
        agent = get(conn, agent_id)
        if slot_id not in {int(s["id"]) for s in agent.slots}:
            raise NotFound(f"agent {agent_id} has no slot {slot_id}")
        off = set(agent.disabled_slots) - {slot_id} | (set() if enabled else {slot_id})
        conn.execute("UPDATE agents SET disabled_slots=? WHERE id=?",
                     (json.dumps(sorted(off)), agent_id))
    return Done(get(conn, agent_id), notify("agents") | Effects(kick=True))
