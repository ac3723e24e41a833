"""What a Determined container has under /run/determined, made for one allocation on the host.

Determined's `prep_container` writes `/run/determined/info/{cluster,trial,rendezvous,resources}
.json` before user code runs, and the real `determined` package reads only those files
(`determined/_info.py`: no file, no cluster, and `core.init()` quietly falls back to a dummy).
The agent writes the same files, field for field, into a per-allocation run dir; the sandbox
mounts that dir at /run/determined, the work dir at /run/determined/workdir, and shared_fs
checkpoint storage at /determined_shared_fs, as Determined's containers have them.

Without namespaces the run dir stays where it is: DET_RUN_DIR names it, and the trial's
`sitecustomize` (dettui/launch/site) points the real package there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dettui.launch import spec
from dettui.launch.spec import Topology

RUN_DIR = "/run/determined"
WORKDIR = f"{RUN_DIR}/workdir"
MODEL_DIR = f"{RUN_DIR}/train/model"
SHARED_FS = "/determined_shared_fs"


@dataclass(frozen=True)
class Mount:
    """`source` (a host path) mounted at `target` inside the allocation's mount namespace;
    `identity` ("st_dev:st_ino", `trialuser.pin`) what `source` was when the agent checked it,
    which the sandbox requires of what it bound ("": the agent's own path, not checked)."""

    source: Path
    target: str
    identity: str = ""


def info_files(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The four info files of `determined._info`, from the allocation's DET_* environment."""
    config = json.loads(env["DET_EXPERIMENT_CONFIG"])
    slot_ids = json.loads(env.get("DET_SLOT_IDS") or "[]")
    cluster = {
        "master_url": env["DET_MASTER"], "cluster_id": env.get("DET_CLUSTER_ID", ""),
        "agent_id": env.get("DET_AGENT_ID", ""), "slot_ids": slot_ids,
        "task_id": env.get("DET_TASK_ID", ""), "allocation_id": env.get("DET_ALLOCATION_ID", ""),
        "session_token": env.get("DET_SESSION_TOKEN", ""),
        "task_type": env.get("DET_TASK_TYPE", "TRIAL"),
        "master_cert_name": env.get("DET_MASTER_CERT_NAME"),
        "master_cert_file": env.get("DET_MASTER_CERT_FILE"),
        "latest_checkpoint": env.get("DET_LATEST_CHECKPOINT") or None,
    }
    trial = {
        "trial_id": int(env["DET_TRIAL_ID"]), "experiment_id": int(env["DET_EXPERIMENT_ID"]),
        "trial_seed": int(env.get("DET_TRIAL_SEED") or 0),
        "hparams": json.loads(env.get("DET_HPARAMS") or "{}"), "config": config,
        "steps_completed": int(env.get("DET_STEPS_COMPLETED") or 0),
        "trial_run_id": int(env.get("DET_TRIAL_RUN_ID") or 1),
        "debug": bool(config.get("debug", False)),
        "inter_node_network_interface": env.get("DET_INTER_NODE_NETWORK_INTERFACE"),
    }
    return {"cluster.json": cluster, "trial.json": trial,
            "rendezvous.json": rendezvous(env, len(slot_ids)),
            "resources.json": {"gpu_uuids": json.loads(env.get("DETTUI_GPU_UUIDS") or "[]")}}


def rendezvous(env: Mapping[str, str], my_slots: int) -> dict[str, Any]:
    """Every container's address (chief first), this one's rank, and their slot counts."""
    topo = Topology.from_env(env)
    counts = list(topo.slots_per_node) if spec.RENDEZVOUS in env else [my_slots]
    return {"container_addrs": list(topo.addresses), "container_rank": topo.node_rank,
            "container_slot_counts": counts}


def write(run_dir: Path, env: Mapping[str, str], workdir: Path, mounted: bool) -> None:
    """Fill the allocation's run dir: `info/*.json`, and `workdir` (a mount point when the
    sandbox mounts the run dir at /run/determined, else a link to the work dir)."""
    info = run_dir / "info"
    info.mkdir(parents=True, exist_ok=True)
    for name, content in info_files(env).items():
        path = info / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
    link = run_dir / "workdir"
    if mounted:
        link.mkdir(exist_ok=True)
        (run_dir / "train" / "model").mkdir(parents=True, exist_ok=True)
    elif not link.is_symlink():
        link.symlink_to(workdir, target_is_directory=True)


def mounts(run_dir: Path, workdir: Path, config: Mapping[str, Any]) -> list[Mount]:
    """What the sandbox mounts, in order: the run dir, the work dir inside it (also where
    Determined extracts the context), and shared_fs storage where the real package looks."""
    out = [Mount(run_dir, RUN_DIR), Mount(workdir, WORKDIR), Mount(workdir, MODEL_DIR)]
    storage = config.get("checkpoint_storage") or {}
    host_path = storage.get("host_path")
    if storage.get("type") == "shared_fs" and isinstance(host_path, str) and host_path:
        out.append(Mount(Path(host_path), SHARED_FS))
    return out


# Determined's per-container ports (SEMANTICS §2.3), each the real package's environment override:
# torchrun's rendezvous, the ZMQ pair of DistributedContext, and the DeepSpeed/Horovod sshd.
PORT_NAMES = ("C10D_PORT", "INTER_TRAIN_PROCESS_COMM_PORT_1", "INTER_TRAIN_PROCESS_COMM_PORT_2",
              "DTRAIN_SSH_PORT")


def ports(env: Mapping[str, str], free_port: Callable[[], int]) -> dict[str, str]:
    """The allocation's ports: from the master's rendezvous port and the three after it when
    the allocation spans agents (every node must agree), else free ports of this machine
    (two trials on one machine must not share them)."""
    if spec.RENDEZVOUS in env:
        base = Topology.from_env(env).port
        return {name: str(base + i) for i, name in enumerate(PORT_NAMES)}
    return {name: str(free_port()) for name in PORT_NAMES}


def environment(run_dir: Path, workdir: Path, mounted: bool) -> dict[str, str]:
    """DET_RUN_DIR and DET_WORKDIR as the trial sees them."""
    if mounted:
        return {"DET_RUN_DIR": RUN_DIR, "DET_WORKDIR": WORKDIR}
    return {"DET_RUN_DIR": str(run_dir), "DET_WORKDIR": str(workdir)}
