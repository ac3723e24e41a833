"""What an agent needs to start one allocation: the entrypoint, the DET_* environment, and
the Unix user it runs as (the experiment owner's linked agent user; None when unlinked: the
agent's default trial user).

Built on the store thread from committed records (SEMANTICS §2.1).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from dettui.launch.spec import C10D_PORT, Topology
from dettui.master.settings import MasterSettings
from dettui.master.store import checkpoints as ckpt_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store import users as user_store
from dettui.master.store.records import Agent, Allocation, User
from dettui.master.tokens import Mint
from dettui.protocol import AgentUser, StartWork

SLOT_TYPE_CUDA = "cuda"


def build_start(
    conn: sqlite3.Connection, alloc: Allocation, agent: Agent, peers: dict[str, Agent],
    cluster_id: str, settings: MasterSettings, mint: Mint,
) -> StartWork:
    """The start message for `agent`'s part of the allocation (node rank = its part's index)."""
    trial = trial_store.get(conn, alloc.trial_id)
    exp = exp_store.get(conn, trial.experiment_id)
    latest = ckpt_store.latest_for_trial(conn, trial.id)
    slot_types = {int(s["id"]): s.get("type", "cpu") for s in agent.slots}
    my_slots = alloc.slots_on(agent.id)
    cuda = [s for s in my_slots if slot_types.get(s) == SLOT_TYPE_CUDA]
    node_rank = alloc.agents.index(agent.id)
    token = mint.allocation(alloc.id)
    env = {
        "DET_CLUSTER_ID": cluster_id,
        "DET_MASTER_ID": cluster_id,
        "DET_AGENT_ID": agent.id,
        "DET_SLOT_IDS": json.dumps(my_slots),
        "DET_CONTAINER_ID": alloc.container_id(agent.id),
        "DET_RESOURCES_ID": alloc.container_id(agent.id),
        "DET_RESOURCES_TYPE": "dettui-process",
        "DET_TASK_ID": trial.task_id,
        "DET_ALLOCATION_ID": alloc.id,
        "DET_SESSION_TOKEN": token,
        "DET_USER": exp.username,
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": str(exp.id),
        "DET_TRIAL_ID": str(trial.id),
        "DET_TRIAL_RUN_ID": str(alloc.run_id),
        "DET_TRIAL_SEED": str(trial.seed),
        "DET_HPARAMS": json.dumps(trial.hparams),
        "DET_EXPERIMENT_CONFIG": json.dumps(exp.config),
        "DET_STEPS_COMPLETED": str(latest.steps_completed or 0) if latest else "0",
        "DET_TASK_LOGGING_METADATA": json.dumps(
            {"allocation_id": alloc.id, "task_id": trial.task_id}
        ),
    }
    if latest is not None:
        env["DET_LATEST_CHECKPOINT"] = latest.uuid
    owner = user_store.by_name(conn, exp.username)
    if owner is not None and owner.active:
        # As Determined: the owner's own session (made with the allocation, ended with it),
        # for the CLI and SDK inside the trial.
        env["DET_USER_TOKEN"] = mint.task_user(alloc.id)
    if len(alloc.parts) > 1:
        env.update(Topology(tuple(address_of(peers.get(a)) for a in alloc.agents), node_rank,
                            tuple(len(sl) for _, sl in alloc.parts),
                            alloc.port or C10D_PORT).to_env())
    if not cuda:
        # One compute thread per CPU slot: torch's default (every core) oversubscribes the
        # machine as soon as two trials share it. The experiment's own variables win.
        env["OMP_NUM_THREADS"] = str(max(1, len(my_slots)))
    env.update(user_environment(exp.config, "cuda" if cuda else "cpu"))
    return StartWork(
        allocation_id=alloc.id, task_id=trial.task_id, trial_id=trial.id,
        experiment_id=exp.id, run_id=alloc.run_id, slots=my_slots, node_rank=node_rank,
        cuda_devices=cuda, entrypoint=exp.conf.entrypoint, env=env, session_token=token,
        owner_id=exp.owner_id, checkpoint_root=str(settings.checkpoint_root),
        agent_user=agent_user(owner), **fork_choice(agent.pool, settings, exp.conf))


def fork_choice(pool: str, settings: MasterSettings, conf: Any) -> dict[str, Any]:
    """Whether the trial may be forked from its agent's fork server, and if not who says
    so: the experiment (`environment.fork_server: false`) or the resource pool."""
    if not conf.environment.fork_server:
        return {"fork_server": False, "fork_off": "environment.fork_server is false"}
    if pool in settings.fresh_pools:
        return {"fork_server": False,
                "fork_off": f"resource pool {pool} has fork_server: false"}
    return {"fork_server": True}


def agent_user(owner: User | None) -> AgentUser | None:
    """The Unix user the owner's trials run as: its linked agent user, or None (unlinked)."""
    if owner is None or owner.agent is None:
        return None
    link = owner.agent
    return AgentUser(uid=link.uid, gid=link.gid, user=link.user, group=link.group)


def build_starts(
    conn: sqlite3.Connection, parts: list[tuple[Allocation, Agent, dict[str, Agent]]],
    cluster_id: str, settings: MasterSettings, mint: Mint,
) -> list[StartWork]:
    """`build_start` of each (allocation, agent, peers), in one store call: a pass that starts
    a hundred trials waits once behind the store's queue, not a hundred times."""
    return [build_start(conn, alloc, agent, peers, cluster_id, settings, mint)
            for alloc, agent, peers in parts]


def user_environment(config: dict[str, Any], device: str) -> dict[str, str]:
    """`environment.environment_variables`: a list of K=V, or one list per device type."""
    raw = (config.get("environment") or {}).get("environment_variables") or []
    if isinstance(raw, dict):
        raw = raw.get(device) or []
    out: dict[str, str] = {}
    for item in raw:
        key, sep, value = str(item).partition("=")
        if sep and key:
            out[key] = value
    return out


def address_of(agent: Agent | None) -> str:
    """Where peers reach an agent: its first advertised address."""
    if agent is None or not agent.addresses:
        return "127.0.0.1"
    return agent.addresses[0]
