"""ClusterInfo and TrialInfo, shaped like Determined's, read from the DET_* environment."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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

    @property
    def container_rank(self) -> int:
        return 0


def get_cluster_info(env: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The allocation's info, or None off-cluster (no DET_SESSION_TOKEN / DET_TRIAL_ID)."""
    env = os.environ if env is None else env
    if not env.get("DET_SESSION_TOKEN") or not env.get("DET_TRIAL_ID"):
        return None
    trial = TrialInfo(
        trial_id=int(env["DET_TRIAL_ID"]), experiment_id=int(env["DET_EXPERIMENT_ID"]),
        trial_seed=int(env.get("DET_TRIAL_SEED", "0")),
        hparams=json.loads(env.get("DET_HPARAMS", "{}")),
        config=json.loads(env.get("DET_EXPERIMENT_CONFIG", "{}")),
        steps_completed=int(env.get("DET_STEPS_COMPLETED", "0")),
        trial_run_id=int(env.get("DET_TRIAL_RUN_ID", "1")),
    )
    return ClusterInfo(
        master_url=env["DET_MASTER"], cluster_id=env.get("DET_CLUSTER_ID", ""),
        agent_id=env.get("DET_AGENT_ID", ""),
        slot_ids=json.loads(env.get("DET_SLOT_IDS", "[]")), task_id=env.get("DET_TASK_ID", ""),
        allocation_id=env.get("DET_ALLOCATION_ID", ""),
        session_token=env["DET_SESSION_TOKEN"], task_type=env.get("DET_TASK_TYPE", "TRIAL"),
        latest_checkpoint=env.get("DET_LATEST_CHECKPOINT") or None, trial=trial,
        user=env.get("DET_USER", ""),
    )
