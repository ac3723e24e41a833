"""`pip install 'dettui[determined]'` brings what Determined's images ship that trials import
(the README says which), and ruamel.yaml, which Determined's tutorials import at the top, comes
with dettui itself."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_determined_extra_and_ruamel() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "ruamel.yaml" in _names(project["dependencies"])
    extra = _names(project["optional-dependencies"]["determined"])
    assert {"tensorboard", "ruamel.yaml"} <= extra
    assert "torchvision" not in extra  # it must match the torch build: the README says so
    readme = (REPO / "README.md").read_text()
    assert "pip install 'dettui[determined]'" in readme and "torchvision must match" in readme
