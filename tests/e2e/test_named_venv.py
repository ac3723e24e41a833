"""A venv an entrypoint names by absolute path is bound back under a directory closed to the
trial's user only by its resolved path, and only where no user could swap a directory on its
way (attack review of issue 32): a link the user owns that names a closed directory's content
dressed as a venv (`/tmp/x/v` -> `/tmp/sec/inner`, holding pyvenv.cfg and a flag) reads
nothing there (before: the sandbox resolved the link itself and bound the closed content back;
with a link flipping between a real venv and the closed dir, a race did it for any content);
a link to a real venv under a closed directory still runs that venv."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from dettui.agent import sandbox
from tests.conftest import Served
from tests.e2e.test_single import write_ctx

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="trials change user only on a "
                                 "root agent (this test run is not root)"),
              pytest.mark.skipif(not sandbox.probe().on,
                                 reason=f"no namespaces: {sandbox.probe().note}")]
SAFE_PARENT = Path("/var/lib")  # root's, 0755 up to /: a venv under it cannot be swapped


def _venv(where: Path) -> Path:
    """A venv of root's (its pyvenv.cfg and bin/python3, the system's Python), readable."""
    (where / "bin").mkdir(parents=True, mode=0o755)
    where.chmod(0o755)
    (where / "pyvenv.cfg").write_text(f"home = {Path(os.path.realpath(sys.executable)).parent}\n")
    (where / "bin" / "python3").symlink_to(os.path.realpath(sys.executable))
    (where / "flag").write_text("ROOT-ONLY-FLAG\n")
    for f in (where / "pyvenv.cfg", where / "flag"):
        f.chmod(0o644)
    return where


def _submit(served: Served, where: Path, name: str, entrypoint: str) -> int:
    where.mkdir()
    cfg, ctx = write_ctx(where, f"""
        name: venv-{name}
        entrypoint: {entrypoint}
        searcher: {{name: single, metric: x, max_length: 1}}
        max_restarts: 0
        """, {})
    out = served.cli("e", "create", str(cfg), str(ctx)).stdout
    return int(out.split("Created experiment ")[1].split()[0])


def _logs(served: Served, exp_id: int) -> str:
    served.wait_experiment(exp_id, timeout=120)
    trial = served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]["id"]
    return served.cli("t", "logs", str(trial)).stdout


def test_a_link_into_a_closed_directory_reads_nothing_there(served: Served,
                                                             tmp_path: Path) -> None:
    if not os.access(SAFE_PARENT, os.W_OK):
        pytest.skip(f"{SAFE_PARENT} cannot be written here")
    sec = Path(tempfile.mkdtemp(prefix="dettui-sec-"))  # /tmp/sec: 0700, root's
    closed = Path(tempfile.mkdtemp(prefix="dettui-closed-venv-", dir=SAFE_PARENT))  # 0700
    links = Path(tempfile.mkdtemp(prefix="dettui-links-"))
    try:
        inner = _venv(sec / "inner")  # looks like a venv, but under /tmp (others write there)
        real = _venv(closed / "venv")
        links.chmod(0o755)
        (links / "trap").symlink_to(inner)
        (links / "real").symlink_to(real)
        trap = _submit(served, tmp_path / "trap", "trap",
                       f"{links}/trap/bin/python3 -c 0; cat {inner}/flag && echo GOT-IT; "
                       f"cat {links}/trap/flag && echo GOT-IT-TOO; echo trap-done")
        ok = _submit(served, tmp_path / "real", "real",
                     f"{links}/real/bin/python3 -c \"print('VENV-RAN', open('{real}/flag')"
                     ".read().strip())\"")
        out = _logs(served, trap)
        assert "trap-done" in out and "GOT-IT" not in out and "ROOT-ONLY-FLAG" not in out, out
        out = _logs(served, ok)
        assert "VENV-RAN ROOT-ONLY-FLAG" in out, out  # the venv the link names still runs
    finally:
        for d in (sec, closed, links):
            shutil.rmtree(d, ignore_errors=True)
