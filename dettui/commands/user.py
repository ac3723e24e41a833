"""`dettui user login`."""

from __future__ import annotations

import getpass

from dettui import client as api
from dettui.commands.output import console
from dettui.errors import InvalidArgument


async def login(url: str, username: str | None, password: str | None) -> None:
    name = username or "determined"
    if password is None:
        try:
            password = getpass.getpass(f"Password for user '{name}' (empty if none): ")
        except EOFError:
            raise InvalidArgument(f"no password for user '{name}': the input ended before one "
                                  "was typed; pass --password (\"\" if it is empty) or pipe "
                                  "it in") from None
    async with api.Client(url) as c:
        token = await c.login(name, password)
    api.store_token(url, name, token)
    console.print(f"Logged in as {name} at {url}")
