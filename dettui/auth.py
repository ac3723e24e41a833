"""The CLI's sign-in: tokens kept per master (and per user) in the config dir, and a client
with a working token (the stored one while valid, else a fresh login)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import platformdirs

from dettui import errors
from dettui.client import Client


def token_path() -> Path:
    base = os.environ.get("DETTUI_CONFIG_DIR") or platformdirs.user_config_dir("dettui")
    return Path(base) / "auth.json"


def _tokens() -> dict[str, Any]:
    try:
        data = json.loads(token_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_token(url: str, user: str | None = None) -> tuple[str, str] | None:
    """(username, token) stored for this master: the logged-in user's, or `user`'s."""
    try:
        entry = _tokens().get(url)
        if not entry:
            return None
        if user is None or entry.get("username") == user:
            return (entry["username"], entry["token"]) if "username" in entry else None
        token = (entry.get("others") or {}).get(user)
        return (user, token) if isinstance(token, str) else None
    except (KeyError, TypeError, AttributeError):
        return None


def store_token(url: str, username: str, token: str, *, default: bool = True) -> None:
    """Remember a token. `default`: this user is now the logged-in one (`dettui user login`);
    else it is kept for a one-off `-u USER` only, and the logged-in user stays who it was."""
    path = token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Commands run at once (a script creating 26 experiments) each log in and store: one at a
    # time under a lock, each through its own temporary file (a shared `auth.tmp` was renamed
    # away under another's chmod: FileNotFoundError), so no login is lost or half-written.
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _tokens()
        entry = data.get(url) if isinstance(data.get(url), dict) else None
        entry = entry if entry is not None else {}
        if default or entry.get("username") == username:
            others = dict(entry.get("others") or {})
            others.pop(username, None)
            data[url] = {"username": username, "token": token, "others": others}
        else:
            entry.setdefault("others", {})[username] = token
            data[url] = entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".auth-", suffix=".tmp")  # 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(data, indent=2))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


async def authenticated(url: str, user: str | None = None, *, plain: bool = False) -> Client:
    """A client with a token: the stored one (checked by the first call it makes: if the master
    refuses it, the client signs in again and repeats that call), else a fresh login (empty
    password unless DET_PASS). `plain`: a one-shot command's client (`Client`'s plain)."""
    client = Client(url, plain=plain)
    stored = load_token(url, user)

    async def login() -> None:
        client.token = None
        username = user or os.environ.get("DET_USER") or "determined"
        token = await client.login(username, os.environ.get("DET_PASS", ""))
        store_token(url, username, token, default=user is None)

    if stored:
        client.token = stored[1]
        client.renew = login
        return client
    try:
        await login()
    except errors.DettuiError:
        await client.close()
        raise
    return client
