"""Secrets for the long-lived processes: an agent's credential and the admin password of
`dettui serve`, kept out of the process list.

A secret on the command line (`--token`, `--admin-password`) is visible to every local user in
`ps` and /proc/PID/cmdline, so it still works but prints a warning. The other ways are, in the
order they are looked at: a file (`--token-file`, `--admin-password-file`), then the
environment (`DETTUI_AGENT_TOKEN`, `DETTUI_ADMIN_PASSWORD`; /proc/PID/environ is readable by the
process's own user only). A flag and a file for the same secret together are an error.

A secret file open to every user (any of the mode bits for others) is refused, as ssh refuses
such a key: the secret in it is already out. One the group may read is accepted with a warning
(a service group that shares it is a deliberate set-up). The file holds the secret alone: a
token is the file's text without surrounding white space; a password is the text less one
trailing newline (its own spaces are kept). A pipe is read as a file (`--token-file <(pass
show agent)`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dettui.commands import output
from dettui.errors import InvalidArgument

MAX_BYTES = 4096  # a credential is 57 characters; a password file is not a data file


def read_file(path: Path, what: str, *, strip: bool) -> str:
    """The secret in `path` (see the module's rules on modes and white space)."""
    try:
        with path.open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidArgument(f"cannot read the {what} file {path}: "
                              f"{exc.strerror or exc}") from exc
    if mode & 0o007:
        raise InvalidArgument(f"the {what} file {path} is open to every user (mode "
                              f"{stat.S_IMODE(mode):o}): its secret may be known already; "
                              f"`chmod 600 {path}` (and issue a new one if others could read it)")
    if mode & 0o070:
        output.warn(f"the {what} file {path} is readable by its group (mode "
                    f"{stat.S_IMODE(mode):o}); `chmod 600 {path}` keeps it to its owner")
    if len(data) > MAX_BYTES:
        raise InvalidArgument(f"the {what} file {path} is over {MAX_BYTES} bytes: it should "
                              f"hold the {what} alone")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"the {what} file {path} is not UTF-8 text") from exc
    text = text.strip() if strip else text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise InvalidArgument(f"the {what} file {path} is empty")
    return text


def resolve(*, flag: str | None, flag_name: str, file: Path | None, file_name: str,
            env: str, what: str, strip: bool) -> str | None:
    """The secret from the command line (with a warning), a file, or the environment `env`;
    None when none is given."""
    if flag is not None and file is not None:
        raise InvalidArgument(f"{flag_name} and {file_name} both give the {what}: pass one")
    if file is not None:
        return read_file(file, what, strip=strip)
    if flag is not None:
        output.warn(f"{flag_name} on the command line is visible to every local user (ps); "
                    f"use {file_name} PATH or ${env} instead")
        return flag
    return os.environ.get(env) or None


def agent_token(token: str | None, token_file: Path | None) -> str | None:
    """`dettui agent`'s credential: --token, --token-file or $DETTUI_AGENT_TOKEN."""
    return resolve(flag=token, flag_name="--token", file=token_file, file_name="--token-file",
                   env="DETTUI_AGENT_TOKEN", what="agent token", strip=True)


def admin_password(password: str | None, password_file: Path | None) -> str | None:
    """`dettui serve`'s admin password: --admin-password, --admin-password-file or
    $DETTUI_ADMIN_PASSWORD."""
    return resolve(flag=password, flag_name="--admin-password", file=password_file,
                   file_name="--admin-password-file", env="DETTUI_ADMIN_PASSWORD",
                   what="admin password", strip=False)
