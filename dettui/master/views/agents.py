"""The connected agents as GET /api/v1/agents shows them (Determined's v1Agent with its slots,
plus dettui's telemetry): read by the agents route and the push stream's `agents` topic."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from aiohttp import web

from dettui import DETERMINED_VERSION
from dettui.master.cluster import AgentLink
from dettui.master.http import appkeys
from dettui.master.http.wire import ts
from dettui.master.store import trials as trial_store


def agent_json(link: AgentLink, used: dict[int, str],
               trials: list[dict[str, Any]] | None = None,
               holders: dict[str, tuple[str, int]] | None = None) -> dict[str, Any]:
    """`trials`: what its parts of running trials use (`TrialUsage.by_agent`); `holders`:
    each live allocation's id and trial by its container id without the rank (`holders`)."""
    a = link.agent
    draining = link.draining or a.draining
    slots = {}
    for s in a.slots:
        sid = int(s["id"])
        device_type = "TYPE_CUDA" if s.get("type") == "cuda" else "TYPE_CPU"
        slots[str(sid)] = {
            "id": str(sid), "enabled": a.slot_enabled(sid), "draining": draining,
            "device": {"id": sid, "brand": s.get("brand", ""), "uuid": s.get("uuid") or "",
                       "type": device_type},
            "container": (_container(used[sid], holders or {}) if sid in used else None),
        }
    return {
        "id": a.id, "registeredTime": ts(a.registered_time), "slots": slots,
        "slotStats": slot_stats(list(slots.values())),
        "resourcePools": [a.pool], "enabled": a.enabled, "draining": draining,
        "addresses": a.addresses, "version": DETERMINED_VERSION, "hostname": a.hostname,
        "lastHeartbeat": ts(time.time() - (time.monotonic() - link.last_seen)),
        "telemetry": link.telemetry.json(),  # null until the first heartbeat with a sample
        "noGpuReason": link.no_gpu_reason,  # null when the agent has GPUs
        "sandbox": link.sandbox,  # how its trials run ("OFF (--no-sandbox)" says so loudly)
        # each trial's part here: {"trialId", "experimentId", "allocationId", and a trial's
        # `resources` fields}, by trial id
        "trialResources": trials or [],
    }


def _container(container_id: str, holders: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """Determined's v1Container, plus the allocation and trial it runs (the dashboard lists
    an agent's running trials from them before their first sample)."""
    found = holders.get(container_id.rpartition(".")[0])
    return {"id": container_id, "state": "STATE_RUNNING", "devices": [],
            **({"allocationId": found[0], "trialId": found[1],
                "experimentId": int(exp) if (exp := found[0].partition(".")[0]).isdigit()
                else None} if found else {})}


def holders(trials: dict[str, int]) -> dict[str, tuple[str, int]]:
    """Live allocations (`trials_of_live_allocations`) by their container ids without the
    rank: a container id is the allocation id without the experiment id, and the rank."""
    return {alloc.partition(".")[2]: (alloc, trial) for alloc, trial in trials.items()}


def _slots_and_trials(conn: sqlite3.Connection
                      ) -> tuple[dict[str, dict[int, str]], dict[str, int]]:
    """The slots in use and the live allocations' trials, in one snapshot."""
    return trial_store.slots_in_use(conn), trial_store.trials_of_live_allocations(conn)


def slot_stats(slots: list[dict[str, Any]]) -> dict[str, Any]:
    """Determined's v1SlotStats (required by `det agent list`): counts by type and brand."""
    by: dict[str, dict[str, dict[str, Any]]] = {"typeStats": {}, "brandStats": {}}
    for slot in slots:
        for field, name in (("typeStats", slot["device"]["type"]),
                            ("brandStats", slot["device"]["brand"])):
            stats = by[field].setdefault(name, {"disabled": 0, "draining": 0, "total": 0,
                                                "states": {}})
            stats["total"] += 1
            stats["disabled"] += 0 if slot["enabled"] else 1
            stats["draining"] += 1 if slot["draining"] else 0
            if slot["container"] is not None:
                state = slot["container"]["state"]
                stats["states"][state] = stats["states"].get(state, 0) + 1
    return by


async def agent_objects(app: web.Application) -> list[dict[str, Any]]:
    """Every connected agent as GET /api/v1/agents shows them, ordered by id."""
    cluster = app[appkeys.CLUSTER]
    used, running = await app[appkeys.DB].read(_slots_and_trials)
    trials = cluster.agents.trial_usage.by_agent
    held = holders(running)
    return [agent_json(link, used.get(link.agent.id, {}), trials.get(link.agent.id), held)
            for link in cluster.agents.connected()]

