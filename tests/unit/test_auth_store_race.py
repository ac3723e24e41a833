"""Commands run at once each store their login (a script creating 26 experiments at once):
they shared one `auth.tmp`, renamed away under another's chmod ("FileNotFoundError:
.../auth.tmp", the experiment not created), and read-modify-writes could lose a login."""

from __future__ import annotations

import json
import multiprocessing
import stat
from pathlib import Path

import pytest

from dettui import auth


def _store(config: str, i: int) -> None:
    import os

    os.environ["DETTUI_CONFIG_DIR"] = config
    for round_ in range(20):
        auth.store_token(f"http://127.0.0.1:{9000 + i}", f"user{i}", f"t{i}-{round_}")


def test_logins_stored_at_once_are_all_kept(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(tmp_path))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_store, args=(str(tmp_path), i)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 8
    path = auth.token_path()
    data = json.loads(path.read_text())
    assert {data[f"http://127.0.0.1:{9000 + i}"]["token"] for i in range(8)} == {
        f"t{i}-19" for i in range(8)}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(path.parent.glob(".auth-*.tmp"))
