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


def test_client_commands_load_no_config_schema_or_server() -> None:
    """`dettui job list` and `dettui e list` import neither the config schema (pydantic, YAML:
    0.1 s of a command that must answer in 0.5 s at 10,000 jobs), aiohttp (0.12 s), Rich (0.02
    s: a table that fits is laid out without it) nor the master."""
    code = ("import sys; from dettui import cli; "
            "a = cli._dispatch(cli._parser().parse_args(sys.argv[1:])); "
            "print(sorted({m.split('.')[0] if m.split('.')[0] != 'dettui' else "
            "'.'.join(m.split('.')[:2]) for m in sys.modules} & "
            "{'pydantic', 'yaml', 'aiohttp', 'rich', 'dettui.config', 'dettui.master', "
            "'textual'}))")
    for argv in (["job", "list"], ["e", "list"], ["task", "list"], ["agent", "list"]):
        res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                             text=True, timeout=60)
        assert res.stdout.strip() == "[]", (argv, res.stdout + res.stderr)
