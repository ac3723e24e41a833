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
