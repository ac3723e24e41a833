"""Run at every start of a Python that has dettui installed, by the `.pth` file the package
ships (setup.py): `from determined import core` then works off-cluster as it does in a trial.

It costs next to nothing: a finder that wakes only when a `determined` module is imported, then
asks `dettui.launch.alias`'s finder (which leaves a real `determined` package alone). Stdlib only,
and neither importlib.abc nor typing: those alone would add milliseconds to every interpreter start.
"""

from __future__ import annotations

import sys

TOP = "determined"


class DeferredFinder:
    """On sys.meta_path for good; for `determined` and its modules it asks the alias's finder
    (imported then), which answers only when no real package is importable. It never changes
    sys.meta_path while the import system walks it."""

    stands_in_for_determined = True  # alias.real_package_importable does not ask it

    def __init__(self) -> None:
        self.finder: object = None

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname.partition(".")[0] != TOP:
            return None
        if self.finder is None:
            from dettui.launch import alias

            self.finder = alias.Finder()
        return self.finder.find_spec(fullname, path, target)  # type: ignore[attr-defined]


def install() -> None:
    if not any(isinstance(f, DeferredFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, DeferredFinder())
