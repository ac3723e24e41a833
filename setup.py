"""Ships one file beside the package: `dettui-determined-alias.pth`, which makes
`from determined import core` work in any Python that has dettui installed (see
dettui/launch/alias.py). Everything else about the package is in pyproject.toml.

A `.pth` file must sit at the root of site-packages, which pyproject.toml cannot say: a normal
wheel gets it from build_py (the root of build_lib is the root of the wheel); an editable wheel
(`pip install -e .`) is built by setuptools' editable_wheel, which ignores build_lib and
data_files, so the file is added to the built wheel with its RECORD line.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "dettui-determined-alias.pth"
# Run by site.py at every start of the interpreter: it only puts a finder on sys.meta_path, which
# answers for `determined` later and only when no real `determined` package is importable.
PTH_TEXT = "import dettui.launch.alias_at_start as hook; hook.install()\n"


class BuildPyWithPth(build_py):
    """build_py that also writes the `.pth` at the root of build_lib (a normal wheel's root)."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            Path(self.build_lib, PTH_NAME).write_text(PTH_TEXT)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, PTH_NAME))
        return outputs


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def add_to_wheel(wheel: Path, name: str, text: str) -> None:
    """Rewrite `wheel` with `name` at its root and its line in RECORD."""
    data = text.encode()
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, \
            zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            content = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                dst.writestr(name, data)
                content = content.decode().replace(_record_line(name, data), "")
                content = (_record_line(name, data) + content).encode()
            dst.writestr(info, content)
    rewritten.replace(wheel)


class EditableWheelWithPth(editable_wheel):
    """editable_wheel whose wheel carries the `.pth` too."""

    def run(self) -> None:
        super().run()
        wheels = sorted(Path(self.dist_dir).glob("*-0.editable-*.whl"),
                        key=lambda p: p.stat().st_mtime)
        if not wheels:
            raise RuntimeError(f"no editable wheel in {self.dist_dir} to add {PTH_NAME} to")
        add_to_wheel(wheels[-1], PTH_NAME, PTH_TEXT)


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
