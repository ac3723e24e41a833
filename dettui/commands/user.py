"""`dettui user login|list|create|activate|deactivate|change-password|link-with-agent-user`.

A user's linked agent user (`link-with-agent-user`, admins only, as `det`'s) is the Unix user
and group its trials run as on the agents; `user list` shows it as `uid:gid (user:group)`."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Awaitable, Callable

from dettui import auth
from dettui import client as api
from dettui.commands import output
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
    async with api.Client(url, plain=True) as c:
        token = await c.login(name, password)
    auth.store_token(url, name, token)
    output.console.print(f"Logged in as {name} at {url}")


def _password(prompt: str, given: str | None) -> str:
    if given is not None:
        return given
    try:
        first = getpass.getpass(prompt)
        if getpass.getpass("Again: ") != first:
            raise InvalidArgument("the passwords do not match")
        return first
    except EOFError:
        raise InvalidArgument("no password: the input ended before one was typed; pass "
                              "--password") from None


def action(args: argparse.Namespace) -> Callable[[api.Client], Awaitable[None]]:
    """The user command `args.verb` as a call on a logged-in client."""
    verb = args.verb

    async def list_(c: api.Client) -> None:
        users = await c.users()
        if args.json:
            output.print_json(users)
            return
        output.table("Users", ["ID", "Username", "Admin", "Active", "Agent user"],
                     [(u["id"], u["username"], "yes" if u["admin"] else "",
                       "yes" if u["active"] else "no", agent_user_text(u)) for u in users])

    async def create(c: api.Client) -> None:
        password = _password(f"Password for the new user '{args.username}': ", args.password)
        made = await c.create_user(args.username, password, admin=args.admin)
        output.console.print(f"Created user {made['username']} (id {made['id']})", markup=False)

    async def set_active(c: api.Client) -> None:
        target = await c.user_by_name(args.username)
        await c.set_user_active(target["id"], verb == "activate")
        output.console.print(f"User {args.username} {verb}d", markup=False)

    async def change_password(c: api.Client) -> None:
        name = args.username or (await c.me())["username"]
        target = await c.user_by_name(name)
        password = _password(f"New password for '{name}': ", args.password)
        await c.set_password(target["id"], password)
        output.console.print(f"Password of {name} changed", markup=False)

    async def link(c: api.Client) -> None:
        target = await c.user_by_name(args.username)
        linked = await c.link_agent_user(target["id"], args.agent_uid, args.agent_gid,
                                         args.agent_user, args.agent_group)
        output.console.print(f"User {args.username} runs trials as {agent_user_text(linked)}",
                             markup=False)

    actions = {"list": list_, "ls": list_, "create": create, "activate": set_active,
               "deactivate": set_active, "change-password": change_password,
               "link-with-agent-user": link}
    return actions[verb]


def agent_user_text(user: dict[str, object]) -> str:
    """A user's linked agent user as `uid:gid (user:group)`, or '' when unlinked."""
    link = user.get("agentUserGroup")
    if not isinstance(link, dict):
        return ""
    return (f"{link.get('agentUid')}:{link.get('agentGid')} "
            f"({link.get('agentUser')}:{link.get('agentGroup')})")
