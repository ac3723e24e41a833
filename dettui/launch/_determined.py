"""The top of the `determined` package as dettui offers it (see `dettui.launch.alias`):
Determined's top-level names; `determined.core`, `.pytorch` and `.launch` are dettui's."""

from __future__ import annotations

from typing import Any

from dettui import core
from dettui.core import (
    ClusterInfo,
    InvalidHP,
    RendezvousInfo,
    ResourcesInfo,
    TrialInfo,
    get_cluster_info,
)
from dettui.launch.import_path import import_from_path

__path__: list[str] = []  # a package: `import determined.core` goes through the alias finder
__all__ = ["ClusterInfo", "InvalidHP", "LOG_FORMAT", "RendezvousInfo", "ResourcesInfo",
           "TrialInfo", "core", "get_cluster_info", "import_from_path"]
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


def __getattr__(name: str) -> Any:
    """`determined.TrialContext` and `determined.pytorch` without importing torch up front."""
    if name == "TrialContext":
        from dettui.pytorch import PyTorchTrialContext

        return PyTorchTrialContext
    if name == "pytorch":
        import importlib

        return importlib.import_module("determined.pytorch")
    raise AttributeError(f"module 'determined' (dettui) has no attribute {name!r}")
