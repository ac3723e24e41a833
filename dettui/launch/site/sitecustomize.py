"""Run by every Python process of a dettui trial: the agent puts this directory first on the
trial's PYTHONPATH. Stdlib only; it does two things, each only where needed, then runs the
`sitecustomize` it hides (if the Python has one).

1. `import determined` resolves to dettui's implementation when the real package is not
   importable in this Python (`dettui.launch.alias`), so scripts written for Determined run.
   A Python the experiment chose that has neither (its PATH or entrypoint names it) fails
   that import with one line naming the fix.
2. Without the sandbox's namespaces the real package's fixed container paths do not exist:
   it then reads its info files from DET_RUN_DIR/info instead of /run/determined/info, and
   finds shared_fs checkpoint storage at its host path instead of /determined_shared_fs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
CONTAINER_RUN_DIR = "/run/determined"
INFO_FILES = {"ClusterInfo": "cluster", "TrialInfo": "trial", "RendezvousInfo": "rendezvous",
              "ResourcesInfo": "resources"}


def _patch_info(module: ModuleType) -> None:
    run_dir = os.environ.get("DET_RUN_DIR")
    if not run_dir or os.path.realpath(run_dir) == CONTAINER_RUN_DIR:
        return
    for cls_name, stem in INFO_FILES.items():
        path = os.path.join(run_dir, "info", f"{stem}.json")
        setattr(module, f"DEFAULT_{stem.upper()}_INFO_PATH", path)
        cls = getattr(module, cls_name, None)
        for method in ("_from_file", "_to_file"):
            func = getattr(getattr(cls, method, None), "__func__", getattr(cls, method, None))
            if func is not None and getattr(func, "__defaults__", None):
                func.__defaults__ = (path,)


def _shared_fs_host_path() -> str | None:
    try:
        config = json.loads(os.environ.get("DET_EXPERIMENT_CONFIG") or "{}")
    except ValueError:
        return None
    storage = config.get("checkpoint_storage") if isinstance(config, dict) else None
    if isinstance(storage, dict) and storage.get("type") == "shared_fs":
        host_path = storage.get("host_path")
        return host_path if isinstance(host_path, str) and host_path else None
    return None


def _patch_constants(module: ModuleType) -> None:
    host_path = _shared_fs_host_path()
    container_path = getattr(module, "SHARED_FS_CONTAINER_PATH", None)
    if host_path is None or not isinstance(container_path, str):
        return
    try:
        mounted = os.path.samefile(container_path, host_path)
    except OSError:
        mounted = False
    if not mounted:
        module.SHARED_FS_CONTAINER_PATH = host_path  # type: ignore[attr-defined]


PATCHES = {"determined._info": _patch_info, "determined.common.constants": _patch_constants}


class _Patching(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Any) -> None:
        self.inner, self.patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)


class _RealPackagePatcher(importlib.abc.MetaPathFinder):
    """Patches two modules of the real package right after they run."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Patching(spec.loader, patch)
        return spec


class _NoDeterminedHere(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path of a Python without dettui: when nothing found `determined`,
    the one line saying why (the experiment chose this Python) and what to do."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "determined":
            return None
        raise ModuleNotFoundError(
            f"No module named 'determined': this trial runs {sys.executable} (its "
            "experiment's PATH or entrypoint names it), which has neither Determined's package "
            f"nor dettui; run `{sys.executable} -m pip install determined`, or leave PATH and "
            "that Python out of the experiment to run it on the agent's Python",
            name=fullname)


def _install_alias() -> None:
    try:
        from dettui.launch import alias
    except ImportError:  # a Python without dettui: only the real package can help
        sys.meta_path.append(_NoDeterminedHere())
        return
    alias.install()


def _run_hidden_sitecustomize() -> None:
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _main(hidden: bool = True) -> None:
    """`hidden`: run the Python's own sitecustomize too (a child of the fork server has run it
    already, in the server)."""
    if os.environ.get("DET_RUN_DIR"):
        sys.meta_path.insert(0, _RealPackagePatcher())
    _install_alias()
    if hidden:
        _run_hidden_sitecustomize()


if __name__ == "sitecustomize":  # loaded by the fork server under another name: it runs this
    _main()
