"""Which master a command talks to, found the same way by the CLI, `dettui agent` and the
dashboard: `-m URL`, else `$DET_MASTER`, else the master running on the state dir (its URL is
in the state dir's lock file), else the default http://127.0.0.1:8080.

When the default port answers but is not the one used (this state dir's master had to take
another port), or no master runs on a state dir that had one and the default is used, the
choice comes with one line saying which master is used and why.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from dettui import client, statedir


@dataclass(frozen=True)
class Choice:
    """The master to use, and the line to tell the user (None: nothing to say)."""

    url: str
    note: str | None = None
    local: statedir.Holder | None = None  # the state dir's master, when it is the one used


def explicit(flag: str | None) -> str | None:
    """-m/--master, else $DET_MASTER, normalised; None when neither is given."""
    given = flag or os.environ.get("DET_MASTER")
    return client.master_url(given) if given else None


def choose(flag: str | None, state_dir: Path | None = None, *, wait: float = 3.0) -> Choice:
    """The master of a command: an explicit one always wins; else the state dir's (its own
    running master), else the default."""
    given = explicit(flag)
    if given is not None:
        return Choice(given)
    state_dir = state_dir or statedir.default_dir()
    try:
        found = statedir.holder(state_dir, wait=wait)
        had_one = (state_dir / statedir.LOCK).exists()
    except OSError:  # a state dir this user may not read (another user's master): not its own
        found, had_one = None, False
    if found is not None:
        return Choice(found.url, note_for(found.url, state_dir), found)
    default = client.DEFAULT_MASTER
    if had_one and answers(default):
        return Choice(default, f"no master runs on {state_dir}; using the one at {default} "
                               "(-m URL picks another)")
    return Choice(default)


def note_for(url: str, state_dir: Path) -> str | None:
    """The line for a state dir's master at `url`: said only when the default address answers
    too (another master, or another program, holds it)."""
    default = client.DEFAULT_MASTER
    if url == default or not answers(default):
        return None
    return (f"using the master of {state_dir} at {url} ({default} is not this state dir's "
            "master; -m URL picks another)")


def answers(url: str, timeout: float = 0.3) -> bool:
    """Something listens at `url`'s host and port (a TCP connect, nothing sent)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout):
            return True
    except OSError:
        return False
