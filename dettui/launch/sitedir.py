"""The directory the agent puts first on every trial's PYTHONPATH: it holds the trial's
`sitecustomize` (see dettui/launch/site/sitecustomize.py), which Python runs at start-up in
every process of the trial."""

from __future__ import annotations

from pathlib import Path

DIRECTORY = str(Path(__file__).resolve().parent / "site")
