"""`dettui serve` start-up rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_non_loopback_host_without_password_is_refused(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "dettui.cli", "serve", "--host", "0.0.0.0", "--port", "0",
         "--state-dir", str(tmp_path / "s"), "--no-agent"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 1
    assert "refusing to listen on 0.0.0.0" in res.stderr
    assert "SSH tunnel" in res.stderr
