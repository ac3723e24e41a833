"""`determined` for code written for Determined, on a plain dettui install.

When the real `determined` package is not importable in a trial's Python, `import determined`,
`determined.core`, `determined.pytorch` (and its submodules) and `determined.launch.*` resolve
to dettui's modules: the same module objects, so `determined.core.init is dettui.core.init`.
`python -m determined.launch.torch_distributed` runs dettui's launcher. When the real package
is importable, nothing changes. Every process of a trial installs this through the trial's
`sitecustomize` (dettui/launch/site); the trial harness installs it too; and off-cluster, every
Python that has dettui installed does, at start-up, through the `.pth` file the package ships
(setup.py), so `python train.py` runs the same script anywhere.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType

TOP = "determined"
TOP_TARGET = "dettui.launch._determined"
# determined.<name> -> dettui.<name>, and their submodules likewise
PACKAGES = ("core", "pytorch", "launch")


def target_of(fullname: str) -> str | None:
    """The dettui module that stands for `fullname`, or None if it has none."""
    if fullname == TOP:
        return TOP_TARGET
    head, _, rest = fullname.partition(".")
    if head != TOP or not rest or rest.split(".", 1)[0] not in PACKAGES:
        return None
    return f"dettui.{rest}"


class _Loader(importlib.abc.Loader):
    """Hands out the dettui module itself; gives its code to `python -m`."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the dettui module ran when it was imported); the import machinery
        gave it the alias's spec, which it must not keep (pickle, reload and `-m` read it)."""
        if self.own_spec is not None:
            module.__spec__ = self.own_spec

    def get_code(self, fullname: str) -> CodeType | None:
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec is not None else None
        get_code = getattr(loader, "get_code", None)
        return get_code(self.target) if get_code is not None else None

    def is_package(self, fullname: str) -> bool:
        spec = importlib.util.find_spec(self.target)
        return spec is not None and spec.submodule_search_locations is not None


class Finder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: answers for `determined` only when no other finder can, and for
    its submodules only while `determined` is the alias."""

    stands_in_for_determined = True  # real_package_importable asks no finder so marked

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(TOP) or fullname[len(TOP):len(TOP) + 1] not in ("", "."):
            return None
        if fullname == TOP:
            if real_package_importable():
                return None
        elif not is_alias(sys.modules.get(TOP)):
            return None
        dettui_name = target_of(fullname)
        if dettui_name is None or importlib.util.find_spec(dettui_name) is None:
            return None
        loader = _Loader(dettui_name)
        return importlib.machinery.ModuleSpec(fullname, loader,
                                              is_package=loader.is_package(fullname))


def real_package_importable() -> bool:
    """Whether a finder other than this one finds `determined` (the real package)."""
    for finder in list(sys.meta_path):
        if getattr(finder, "stands_in_for_determined", False):  # this alias, or alias_at_start's
            continue
        find = getattr(finder, "find_spec", None)
        if find is not None and find(TOP, None) is not None:
            return True
    return False


def is_alias(module: ModuleType | None) -> bool:
    return module is not None and getattr(module, "__name__", "") == TOP_TARGET


def install_finder() -> None:
    """Put the finder first on sys.meta_path (once). Cheap enough for every interpreter start:
    whether `determined` is the real package is decided when it is first imported."""
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())


def install() -> bool:
    """Put the finder first on sys.meta_path (once). True when `determined` is, or will be,
    dettui's (the real package is not importable)."""
    install_finder()
    current = sys.modules.get(TOP)
    if current is not None:
        return is_alias(current)
    return not real_package_importable()
