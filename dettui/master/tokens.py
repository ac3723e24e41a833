"""The secrets a trial gets, minted from a key the master keeps beside its state, not in it.

An allocation's DET_SESSION_TOKEN and its owner's DET_USER_TOKEN are HMACs of the allocation id
under the master's key (`<state dir>/secret.key`, mode 0600). The store keeps only their
SHA-256, so a copy of the database gives no token; the master can build a start message again
after a restart (the same id gives the same token) without keeping a secret in a row.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from dettui.master import disk

KEY_FILE = "secret.key"
KEY_BYTES = 32


def _make_key(path: Path) -> None:
    """A new key at `path`, whole or not at all: written beside it, then linked into place (a
    master that starts at the same time keeps its own, the first); on a full disk no empty
    key is left behind to be called damaged at the next start."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    except OSError as exc:
        if not disk.is_full(exc):
            raise
        raise disk.full_disk(path.parent, "the master cannot make its key. Free space there and "
                        "start it again") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@dataclass(frozen=True)
class Mint:
    key: bytes

    @classmethod
    def load(cls, state_dir: Path) -> Mint:
        """The master's key, created (0600, atomically) the first time."""
        path = state_dir / KEY_FILE
        if not path.exists():
            _make_key(path)
        key = path.read_bytes()
        if len(key) < KEY_BYTES:
            raise RuntimeError(f"{path} is damaged ({len(key)} bytes); remove it to make a new "
                               "key (running trials then lose their tokens)")
        return cls(key)

    def _derive(self, purpose: str, alloc_id: str) -> str:
        return hmac.new(self.key, f"{purpose}\0{alloc_id}".encode(), hashlib.sha256).hexdigest()

    def allocation(self, alloc_id: str) -> str:
        """DET_SESSION_TOKEN: what the trial's processes call the master with."""
        return self._derive("allocation", alloc_id)

    def task_user(self, alloc_id: str) -> str:
        """DET_USER_TOKEN: its owner's session for the CLI and SDK inside the trial, valid
        while the allocation runs."""
        return self._derive("task-user-session", alloc_id)
