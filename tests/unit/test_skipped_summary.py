"""The suite's closing summary names every skipped test under its reason (tests/conftest.py's
pytest_terminal_summary), also when xdist runs the tests in workers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

LEGS = '''
import pytest

def test_runs():
    pass

def test_needs_postgres():
    pytest.skip("PostgreSQL not installed: postgresql package")

@pytest.mark.skipif(True, reason="PostgreSQL not installed: postgresql package")
def test_also_needs_postgres():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_needs_slurm(n):
    pytest.skip("no Slurm here")
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_skipped_tests_are_listed_by_name_under_their_reason(tmp_path: Path,
                                                             workers: list[str]) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_terminal_summary  # noqa: F401\n")
    (tmp_path / "test_legs.py").write_text(textwrap.dedent(LEGS))
    run = subprocess.run(
        # Its own basetemp: pytest keeps the 3 latest numbered dirs of /tmp/pytest-of-<user>
        # and removes older ones, which would take the running suite's (its PostgreSQL's data
        # dir went, and the suite's teardown failed).
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers,
         f"--basetemp={tmp_path / 'inner'}", "test_legs.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stdout + run.stderr
    summary = run.stdout[run.stdout.index("not run: 4 skipped"):]
    assert summary.splitlines()[1:7] == [
        "PostgreSQL not installed: postgresql package (2):",
        "  test_legs.py::test_also_needs_postgres",
        "  test_legs.py::test_needs_postgres",
        "no Slurm here (2):",
        "  test_legs.py::test_needs_slurm[1]",
        "  test_legs.py::test_needs_slurm[2]",
    ], run.stdout
    assert "test_runs" not in summary
