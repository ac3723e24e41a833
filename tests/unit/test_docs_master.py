"""docs/master.md names modules a newcomer opens: each it names (and each new name of its table
of old names) exists, so the page cannot drift from the code unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "master.md"
MASTER = ROOT / "dettui" / "master"
MODULE = re.compile(r"\b((?:[a-z_]+/)*[a-z_]+\.py)\b")


def named(text: str) -> set[str]:
    return set(MODULE.findall(text))


def exists(rel: str) -> bool:
    return (MASTER / rel).is_file() or (ROOT / rel).is_file()


def test_the_page_names_only_modules_that_exist() -> None:
    text = PAGE.read_text()
    body, _, old = text.partition("## Old names")
    missing = sorted(m for m in named(body) if not exists(m))
    rows = [line.split("|") for line in old.splitlines() if line.startswith("|")]
    new_names = " ".join(r[2] for r in rows[2:] if len(r) > 2)
    missing += sorted(m for m in named(new_names) if not exists(m))
    assert not missing, f"docs/master.md names modules that do not exist: {missing}"
    assert {"cluster/dispatcher.py", "effects.py", "transitions.py"} <= named(body)


def test_the_check_would_see_a_module_that_is_gone() -> None:
    assert not exists("cluster/hub.py") and "cluster/hub.py" in named("see `cluster/hub.py`")
