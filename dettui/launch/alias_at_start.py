"""Run at every start of a Python that has dettui installed, by the `.pth` file the package
ships (setup.py): `from determined import core` then works off-cluster as it does in a trial.

It costs next to nothing: a finder that wakes only when a `determined` module is imported, then
hands over to `dettui.launch.alias` (which leaves a real `determined` package alone). Stdlib only,
and neither importlib.abc nor typing: those alone would add milliseconds to every interpreter start.
"""

from __future__ import annotations

import sys

TOP = "determined"


class DeferredFinder:
    """On sys.meta_path until the first import of `determined` or one of its modules."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname.partition(".")[0] != TOP:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        from dettui.launch import alias

        alias.install_finder()
        return alias.Finder().find_spec(fullname, path, target)  # type: ignore[arg-type]


def install() -> None:
    if not any(isinstance(f, DeferredFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, DeferredFinder())
