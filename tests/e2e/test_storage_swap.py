"""Checkpoint storage reached through a link a user owns, or in a `storage_path` of the master's
root, is still given to a trial run as an unprivileged user now that the sandbox binds it by
the identity the agent checked (`trialuser.pin`; the swap itself, between the check and the
bind, is tests/unit/test_bind_identity.py): an unswapped source is never refused."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.e2e.test_trial_users import needs_ns, needs_root

pytestmark = pytest.mark.slow

PEEK = """
import os
print("READ", open("/determined_shared_fs/hello.txt").read().strip())
from dettui import core
with core.init() as ctx:
    with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, ckpt):
        (path / "w.txt").write_text("weights")
print("STORED", ckpt)
"""


@needs_root
@needs_ns
def test_storage_through_a_users_link_is_bound_as_checked(served: Served,
                                                          tmp_path: Path) -> None:
    top = Path(tempfile.mkdtemp(prefix="dettui-linked-"))
    try:
        top.chmod(0o755)
        opened = top / "open"
        opened.mkdir()
        opened.chmod(0o1777)
        (opened / "hello.txt").write_text("through the link\n")
        (opened / "hello.txt").chmod(0o644)
        link = top / "link"
        link.symlink_to(opened)
        cfg, ctx = write_ctx(tmp_path, f"""
            name: storage-linked
            entrypoint: python3 peek.py
            searcher: {{name: single, metric: x, max_length: 1}}
            checkpoint_storage: {{type: shared_fs, host_path: {link}}}
            """, {"peek.py": PEEK})
        out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120).stdout
        assert "READ through the link" in out and "STORED" in out, out
        assert "refusing" not in out, out
    finally:
        shutil.rmtree(top, ignore_errors=True)
