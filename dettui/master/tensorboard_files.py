"""An experiment's TensorBoard event files out of its storage (`det e delete-tb-files`):
`<storage>/<cluster id>/tensorboard/experiment/<id>`, where trials write them, as Determined
lays them out. Trials, as unprivileged users, write under that path: it is opened component by
component from the storage base without following a link (dirfd), never by a path a swapped
directory could redirect."""

from __future__ import annotations

import os
from typing import Any

from dettui import dirfd
from dettui.paths import component
from dettui.storage import storage_base

LOCAL = ("shared_fs", "directory")  # storage types whose files the master reaches


def is_local(config: dict[str, Any]) -> bool:
    return (config.get("checkpoint_storage") or {}).get("type") in LOCAL


def remove(config: dict[str, Any], cluster_id: str, exp_id: int) -> bool:
    """Remove the experiment's TensorBoard directory; False if there was none."""
    parts = (component(cluster_id, "cluster id"), "tensorboard", "experiment")
    fds: list[int] = []
    try:
        fd = dirfd.open_path(storage_base(config))
        fds.append(fd)
        for part in parts:
            fd = dirfd.open_dir(fd, part)
            fds.append(fd)
        return dirfd.remove(fd, str(exp_id))
    except (FileNotFoundError, NotADirectoryError):
        return False
    finally:
        for fd in fds:
            os.close(fd)
