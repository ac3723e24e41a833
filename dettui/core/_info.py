"""ClusterInfo and TrialInfo, shaped like Determined's (`determined/_info.py`), read from the
DET_* environment the agent sets (the same facts as its /run/determined/info files)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dettui.launch.spec import RENDEZVOUS, Topology


@dataclass(frozen=True)
class TrialInfo:
    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    steps_completed: int
    trial_run_id: int
    debug: bool = False
    inter_node_network_interface: str | None = None

    # Determined's private names, which its own trainers (and some user code) read.
    @property
    def _config(self) -> dict[str, Any]:
        return self.config

    @property
    def _steps_completed(self) -> int:
        return self.steps_completed

    @property
    def _trial_run_id(self) -> int:
        return self.trial_run_id


@dataclass(frozen=True)
class RendezvousInfo:
    container_addrs: list[str]
    container_rank: int
    container_slot_counts: list[int]


@dataclass(frozen=True)
class ResourcesInfo:
    gpu_uuids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ClusterInfo:
    master_url: str
    cluster_id: str
    agent_id: str
    slot_ids: list[int]
    task_id: str
    allocation_id: str
    session_token: str
    task_type: str
    latest_checkpoint: str | None
    trial: TrialInfo
    user: str = ""
    rendezvous: RendezvousInfo | None = None
    resources: ResourcesInfo = field(default_factory=ResourcesInfo)
    master_cert_name: str | None = None
    master_cert_file: str | None = None

    @property
    def container_addrs(self) -> list[str]:
        return self.rendezvous.container_addrs if self.rendezvous else ["127.0.0.1"]

    @property
    def container_rank(self) -> int:
        return self.rendezvous.container_rank if self.rendezvous else 0

    @property
    def container_slot_counts(self) -> list[int]:
        return (self.rendezvous.container_slot_counts if self.rendezvous
                else [len(self.slot_ids)])

    @property
    def gpu_uuids(self) -> list[str]:
        return self.resources.gpu_uuids

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's `data` section."""
        return dict(self.trial.config.get("data") or {})


def _rendezvous(env: Mapping[str, str], slots: int) -> RendezvousInfo:
    topo = Topology.from_env(env)
    counts = list(topo.slots_per_node) if RENDEZVOUS in env else [slots]
    return RendezvousInfo(list(topo.addresses), topo.node_rank, counts)


def get_cluster_info(env: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The allocation's info, or None off-cluster (no DET_SESSION_TOKEN / DET_TRIAL_ID)."""
    env = os.environ if env is None else env
    if not env.get("DET_SESSION_TOKEN") or not env.get("DET_TRIAL_ID"):
        return None
    config = json.loads(env.get("DET_EXPERIMENT_CONFIG", "{}"))
    trial = TrialInfo(
        trial_id=int(env["DET_TRIAL_ID"]), experiment_id=int(env["DET_EXPERIMENT_ID"]),
        trial_seed=int(env.get("DET_TRIAL_SEED", "0")),
        hparams=json.loads(env.get("DET_HPARAMS", "{}")), config=config,
        steps_completed=int(env.get("DET_STEPS_COMPLETED", "0")),
        trial_run_id=int(env.get("DET_TRIAL_RUN_ID", "1")),
        debug=bool(config.get("debug", False)),
        inter_node_network_interface=env.get("DET_INTER_NODE_NETWORK_INTERFACE"),
    )
    slot_ids = json.loads(env.get("DET_SLOT_IDS", "[]"))
    return ClusterInfo(
        master_url=env["DET_MASTER"], cluster_id=env.get("DET_CLUSTER_ID", ""),
        agent_id=env.get("DET_AGENT_ID", ""), slot_ids=slot_ids,
        task_id=env.get("DET_TASK_ID", ""), allocation_id=env.get("DET_ALLOCATION_ID", ""),
        session_token=env["DET_SESSION_TOKEN"], task_type=env.get("DET_TASK_TYPE", "TRIAL"),
        latest_checkpoint=env.get("DET_LATEST_CHECKPOINT") or None, trial=trial,
        user=env.get("DET_USER", ""), rendezvous=_rendezvous(env, len(slot_ids)),
        resources=ResourcesInfo(json.loads(env.get("DETTUI_GPU_UUIDS") or "[]")),
        master_cert_name=env.get("DET_MASTER_CERT_NAME"),
        master_cert_file=env.get("DET_MASTER_CERT_FILE"),
    )
