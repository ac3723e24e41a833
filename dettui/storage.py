"""Where checkpoints live, from an experiment config's `checkpoint_storage` (pure, stdlib).

Shared by the Core API (writing) and the master (garbage collection).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def storage_base(config: dict[str, Any]) -> Path:
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "directory":
        return Path(storage["container_path"])
    base = Path(storage.get("host_path") or "/tmp")
    sub = storage.get("storage_path")
    if sub:
        base = Path(sub) if Path(sub).is_absolute() else base / sub
    return base


def storage_paths(config: dict[str, Any]) -> list[Path]:
    """Every path of the host a trial with this config is given: the checkpoint storage, and
    for shared_fs its host_path too (mounted whole at /determined_shared_fs)."""
    storage = config.get("checkpoint_storage") or {}
    out = [storage_base(config)]
    if storage.get("type") == "shared_fs" and storage.get("host_path"):
        out.append(Path(storage["host_path"]))
    return out
