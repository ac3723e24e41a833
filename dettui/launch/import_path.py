"""Determined's `determined.import_from_path`: import a checkpoint's `code/` as if anew.
Its own module so that both the stand-in `determined` and `dettui.pytorch` (which loads
checkpoints' trial classes with it) can import it without importing each other."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator


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
