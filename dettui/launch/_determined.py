"""The top of the `determined` package as dettui offers it (see `dettui.launch.alias`):
Determined's top-level names; `determined.core`, `.pytorch` and `.launch` are dettui's."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
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

__path__: list[str] = []  # a package: `import determined.core` goes through the alias finder
__all__ = ["ClusterInfo", "InvalidHP", "LOG_FORMAT", "RendezvousInfo", "ResourcesInfo",
           "TrialInfo", "core", "get_cluster_info", "import_from_path"]
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


def _modules_from(directory: str) -> list[str]:
    top = os.path.abspath(directory) + os.sep
    return [name for name, module in list(sys.modules.items())
            if (getattr(module, "__file__", None) or "").startswith(top)]


@contextlib.contextmanager
def import_from_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Determined's: import from `path` (a checkpoint's code/) as if anew; afterwards the
    modules imported from there are forgotten and the working directory's are back, so a
    same-named module of your own stays yours."""
    popped = {name: sys.modules.pop(name) for name in _modules_from(os.getcwd())}
    old_path = sys.path
    sys.path = [os.path.abspath(path)] + [p for p in sys.path if p not in ("", os.getcwd())]
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for name in _modules_from(os.fspath(path)):
            del sys.modules[name]
        sys.path = old_path
        sys.modules.update(popped)


def __getattr__(name: str) -> Any:
    """`determined.TrialContext` and `determined.pytorch` without importing torch up front."""
    if name == "TrialContext":
        from dettui.pytorch import PyTorchTrialContext

        return PyTorchTrialContext
    if name == "pytorch":
        import importlib

        return importlib.import_module("determined.pytorch")
    raise AttributeError(f"module 'determined' (dettui) has no attribute {name!r}")
