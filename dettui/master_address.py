"""Which master a command talks to, found the same way by the CLI, `dettui agent` and the
dashboard: `-m URL`, else `$DET_MASTER`, else the master running on the state dir (its URL is
in the state dir's lock file), else the default http://127.0.0.1:8080.

When the default port answers but is not the one used (this state dir's master had to take
another port), or no master runs on a state dir that had one and the default is used, the
choice comes with one line saying which master is used and why.

A lock file is believed only when it is this user's (statedir.Untrusted) and its URL is on this
host (loopback, or an address of this machine): otherwise it is ignored, in one line. When no
master runs on a state dir and nothing answers at the default address either, the choice
carries the error to give (`absent`), naming the state dir and where its last master was.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from dettui import client, statedir
from dettui.errors import DettuiError


@dataclass(frozen=True)
class Choice:
    """The master to use, and the line to tell the user (None: nothing to say)."""

    url: str
    note: str | None = None
    local: statedir.Holder | None = None  # the state dir's master, when it is the one used
    absent: str | None = None  # no master to use: the error to give, instead of trying `url`


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
    ignored = None
    try:
        found = local_holder(state_dir, wait=wait)
        had_one = (state_dir / statedir.LOCK).exists()
    except statedir.Untrusted as exc:  # another user's lock or state dir: said, not used
        found, had_one, ignored = None, False, exc.message
    except OSError:  # a state dir this user may not read (another user's master): not its own
        found, had_one = None, False
    if found is not None:
        return Choice(found.url, note_for(found.url, state_dir), found)
    default = client.DEFAULT_MASTER
    if not had_one:
        return Choice(default, ignored)
    if answers(default):
        return Choice(default, f"no master runs on {state_dir}; using the one at {default} "
                               "(-m URL picks another)")
    last = statedir.last_url(state_dir)
    was = f" (the last one was at {last})" if last else ""
    return Choice(default, absent=(
        f"no master runs on {state_dir}{was}, nor at {default}; start one with `dettui serve` "
        "or `dettui`, or give its address with -m or DET_MASTER"))


def local_holder(state_dir: Path, wait: float = 3.0) -> statedir.Holder | None:
    """The master running on `state_dir` (statedir.holder), its URL normalised; Untrusted when
    the lock file is another user's or its URL is not of this host."""
    found = statedir.holder(state_dir, wait=wait)
    if found is None:
        return None
    path = state_dir / statedir.LOCK
    try:
        url = client.master_url(found.url)
    except DettuiError as exc:
        raise statedir.Untrusted(path, "its address is not a master URL") from exc
    if not on_this_host(url):
        host = urllib.parse.urlsplit(url).hostname or ""
        raise statedir.Untrusted(path, f"its address {host[:100]!r} is not of this host")
    return statedir.Holder(url, found.pid, found.mode)


def on_this_host(url: str) -> bool:
    """`url`'s host is loopback, or an address of one of this machine's interfaces (a name is
    resolved, and every address it gives must be one)."""
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            addresses = {ipaddress.ip_address(info[4][0].split("%")[0])
                         for info in socket.getaddrinfo(host, None)}
        except (OSError, ValueError):
            return False
    own = None
    for address in addresses:
        if address.is_loopback or address.is_unspecified:
            continue
        own = own if own is not None else _own_addresses()
        if address not in own:
            return False
    return bool(addresses)


def _own_addresses() -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    import psutil

    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    found.add(ipaddress.ip_address(entry.address.split("%")[0]))
                except ValueError:
                    continue
    return found


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
