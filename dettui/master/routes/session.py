"""/info, login, users, and the master's identity.

Passwords are hashed and checked off the event loop (`offload.cpu`: scrypt takes ~0.1 s); a
login with a hash of an older form replaces it. A user without a password (Determined's fresh
`determined` and `admin`) logs in only from the master's own host. A user's linked agent user
(Determined's `agentUserGroup`) is set by admins only: a uid and gid in 0..2^31-1 and Unix-safe
names of at most 32 characters, all four, or all four null to unlink.
"""

from __future__ import annotations

import ipaddress
import json

from aiohttp import web

from dettui.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from dettui.master import offload
from dettui.master.http import appkeys, openapi, shapes
from dettui.master.http.body import read_json
from dettui.master.http.middleware import (
    not_for_trials,
    principal,
    require_admin,
    require_user,
    task_route,
)
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    AgentUserGroupBody,
    LoginBody,
    PasswordBody,
    PatchUserBody,
    PostUserBody,
    parse,
)
from dettui.master.http.wire import json_response, paginate, path_int, query_bool
from dettui.master.store import users
from dettui.master.store.records import AgentLink, User

routes = web.RouteTableDef()


def user_json(u: User) -> dict[str, object]:
    link = u.agent
    group = None if link is None else {"agentUid": link.uid, "agentGid": link.gid,
                                       "agentUser": link.user, "agentGroup": link.group}
    return {"id": u.id, "username": u.username, "admin": u.admin, "active": u.active,
            "displayName": u.display_name or "", "agentUserGroup": group, "remote": False}


def agent_link(body: AgentUserGroupBody) -> AgentLink | None:
    """The link a PATCH asks for: all four fields, or none (unlink)."""
    values = (body.agent_uid, body.agent_gid, body.agent_user, body.agent_group)
    if all(v is None for v in values):
        return None
    if body.agent_uid is None or body.agent_gid is None or not body.agent_user \
            or not body.agent_group:
        raise InvalidArgument("agentUserGroup: agentUid, agentGid, agentUser and agentGroup "
                              "are all needed (or all null, to unlink)")
    return AgentLink(body.agent_uid, body.agent_gid, body.agent_user, body.agent_group)


async def _stored(password: str | None, is_hashed: bool) -> str | None:
    """The stored form of a body's password (None: none given), hashed off the loop."""
    if password is None:
        return None
    hashed = password if is_hashed else users.client_hash(password)
    return await offload.cpu(users.hash_password, hashed)


@routes.get("/info")
async def info(request: web.Request) -> web.Response:
    s = request.app[appkeys.SETTINGS]
    body = shapes.master_info(request.app[appkeys.CLUSTER_ID], s.cluster_name)
    body.update({"master_id": body["masterId"], "cluster_id": body["clusterId"],
                 "cluster_name": body["clusterName"], "sso_providers": []})
    return json_response(body)


@routes.get("/api/v1/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    """This API as OpenAPI 3.1, generated from the routes and their body models."""
    return web.Response(body=_openapi(request.app), content_type="application/json")


def _openapi(app: web.Application) -> bytes:
    """Every app of this process has the same routes: one document, built on first use."""
    if not _SPEC:
        from dettui.master.http.middleware import PUBLIC, TASK_HANDLERS

        _SPEC.append(json.dumps(openapi.spec(app, PUBLIC, TASK_HANDLERS)).encode())
    return _SPEC[0]


_SPEC: list[bytes] = []


@routes.get("/api/v1/master")
async def master(request: web.Request) -> web.Response:
    s = request.app[appkeys.SETTINGS]
    return json_response(shapes.master_info(request.app[appkeys.CLUSTER_ID], s.cluster_name))


@routes.post("/api/v1/auth/login")
@op(body=LoginBody)
async def login(request: web.Request) -> web.Response:
    body = await parse(request, LoginBody)
    db = request.app[appkeys.DB]
    user = await db.run(users.by_name, body.username)
    hashed = body.password if body.is_hashed else users.client_hash(body.password)
    if hashed == "" and not _from_this_host(request):  # before the lookup: names no users
        raise Unauthenticated(
            "invalid credentials: a login without a password is only taken from the master's "
            "own host (127.0.0.1); set one there first (dettui user change-password NAME)")
    # A name that does not exist costs a check too: the answer's delay names no users.
    stored = user.password_hash if user is not None else None
    if not await offload.cpu(_matches, stored, hashed) or user is None:
        raise Unauthenticated("invalid credentials")
    if not user.active:
        raise PermissionDenied("user is not active")
    run = request.app[appkeys.CLUSTER].dispatcher.run
    if users.needs_rehash(user.password_hash):
        new = await offload.cpu(users.hash_password, hashed)
        await run(users.rehash, user.id, user.password_hash, new)
    token = await run(users.new_session, user.id, request.app[appkeys.SETTINGS].session_lifetime)
    return json_response({"token": token, "user": user_json(user)})


def _empty_only_here(request: web.Request, password: str) -> None:
    """An empty password is set only from the master's own host: from afar it would be a
    user nobody can log in as there, and a master with one will not listen beyond loopback
    at its next start (any user could keep it from restarting so)."""
    if password == "" and not _from_this_host(request):
        raise InvalidArgument("password: an empty password is only set from the master's own "
                              "host (a master with a password-less user listens only on "
                              "127.0.0.1); give one")


def _from_this_host(request: web.Request) -> bool:
    """Whether the caller is on the master's own host: a loopback peer, not relaying for
    another (a proxy's Forwarded / X-Forwarded-For header counts as a remote caller)."""
    if any(h in request.headers for h in ("Forwarded", "X-Forwarded-For", "X-Real-IP")):
        return False
    try:
        peer = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return False
    mapped = getattr(peer, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or peer).is_loopback


def _matches(stored: str | None, hashed: str) -> bool:
    """`users.password_matches`, against the decoy when there is no such user (False)."""
    if stored is None:
        users.password_matches(users.decoy(), hashed)
        return False
    return users.password_matches(stored, hashed)


@routes.post("/api/v1/auth/logout")
async def logout(request: web.Request) -> web.Response:
    await request.app[appkeys.CLUSTER].dispatcher.run(users.drop_session,
                                                      principal(request).token)
    return json_response({})


@task_route
async def me(request: web.Request) -> web.Response:
    return json_response({"user": user_json(require_user(request))})


routes.get("/api/v1/me")(me)
routes.get("/api/v1/auth/user")(me)


@routes.get("/api/v1/users")
@op(query={"active": bool}, paged=True)
async def list_users(request: web.Request) -> web.Response:
    """Every user (`det user list`), `active=true|false` to filter, paginated."""
    found = await request.app[appkeys.DB].read(users.list_, query_bool(request, "active"))
    page, pagination = paginate([user_json(u) for u in found], request)
    return json_response({"users": page, "pagination": pagination})


@routes.get("/api/v1/users/{id}")
async def get_user(request: web.Request) -> web.Response:
    user = await request.app[appkeys.DB].run(users.by_id, path_int(request, "id"))
    return json_response({"user": user_json(user)})


@routes.get("/api/v1/users/{username}/by-username")
async def get_user_by_name(request: web.Request) -> web.Response:
    name = request.match_info["username"]
    user = await request.app[appkeys.DB].run(users.by_name, name)
    if user is None:
        raise NotFound(f"user '{name}' not found")
    return json_response({"user": user_json(user)})


@routes.post("/api/v1/users")
@op(body=PostUserBody)
@not_for_trials("create a user")
async def create_user(request: web.Request) -> web.Response:
    """A new user (`det user create`, `dettui user create`): admins only."""
    require_admin(request)
    body = await parse(request, PostUserBody)
    new = body.user
    name = new.username.strip()
    if not name or len(name) > 128 or any(c.isspace() or c == "/" for c in name):
        raise InvalidArgument("user.username: 1 to 128 characters, without spaces or '/'")
    _empty_only_here(request, body.password or "")
    stored = await _stored(body.password, body.is_hashed) or ""
    user = await request.app[appkeys.CLUSTER].dispatcher.run(
        users.create, name, stored, admin=bool(new.admin), active=new.active is not False,
        display_name=new.display_name)
    assert user is not None
    return json_response({"user": user_json(user)})


@routes.patch("/api/v1/users/{id}")
@op(body=PatchUserBody)
@not_for_trials("change a user (password, name, state, admin or linked agent user)")
async def patch_user(request: web.Request) -> web.Response:
    """Change a user (`det user activate|deactivate|change-password|edit|
    link-with-agent-user`): admins change anyone; a user only their own password and display
    name."""
    me_ = require_user(request)
    user_id = path_int(request, "id")
    body = await parse(request, PatchUserBody)
    group = body.agent_user_group
    if user_id != me_.id or body.active is not None or body.admin is not None \
            or group is not None:
        require_admin(request)
    if body.username is not None or body.remote:
        raise InvalidArgument("renaming users and remote users are not supported by dettui")
    link = agent_link(group) if group is not None else None
    if body.password is not None:
        _empty_only_here(request, body.password)
    stored = await _stored(body.password, body.is_hashed)
    user = await request.app[appkeys.CLUSTER].dispatcher.run(
        users.update, user_id, active=body.active, admin=body.admin,
        display_name=body.display_name, password_hash=stored, agent=link,
        unlink_agent=group is not None and link is None)
    assert user is not None
    return json_response({"user": user_json(user)})


@routes.post("/api/v1/users/{username}/password")
@op(body=PasswordBody)
@not_for_trials("change a password")
async def set_password(request: web.Request) -> web.Response:
    """Admins set anyone's password; users their own. Body: the raw JSON string or {password}."""
    target = request.match_info["username"]
    if require_user(request).username != target:
        require_admin(request)
    raw = await read_json(request)
    password = raw.get("password", "") if isinstance(raw, dict) else raw
    if not isinstance(password, str) or len(password) > 1024:
        raise InvalidArgument("password: must be a string of at most 1024 characters")
    _empty_only_here(request, password)
    stored = await offload.cpu(users.hash_password, users.client_hash(password))
    await request.app[appkeys.CLUSTER].dispatcher.run(users.set_password, target, stored)
    return json_response({})
