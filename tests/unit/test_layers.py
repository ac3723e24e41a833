"""Layer rules: import-linter contracts hold, and the Core API loads no UI or server code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is installed by `make test`"
    res = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_core_loads_neither_textual_nor_aiohttp() -> None:
    code = ("import sys, dettui.core; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'aiohttp')]; "
            "print(bad)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr
