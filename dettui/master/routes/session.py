"""/info, login, the current user, and the master's identity."""

from __future__ import annotations

import json

from aiohttp import web

from dettui.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from dettui.master import keys, openapi, serialize
from dettui.master.bodies import LoginBody, PasswordBody, PatchUserBody, PostUserBody, parse
from dettui.master.middleware import (
    principal,
    read_json,
    require_admin,
    require_user,
    task_route,
)
from dettui.master.openapi import op
from dettui.master.store import users
from dettui.master.store.records import User
from dettui.master.wire import json_response, paginate, path_int, query_bool

routes = web.RouteTableDef()


def user_json(u: User) -> dict[str, object]:
    return {"id": u.id, "username": u.username, "admin": u.admin, "active": u.active,
            "displayName": u.display_name or "", "agentUserGroup": None, "remote": False}


@routes.get("/info")
async def info(request: web.Request) -> web.Response:
    s = request.app[keys.SETTINGS]
    body = serialize.master_info(request.app[keys.CLUSTER_ID], s.cluster_name)
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
        from dettui.master.middleware import PUBLIC, TASK_HANDLERS

        _SPEC.append(json.dumps(openapi.spec(app, PUBLIC, TASK_HANDLERS)).encode())
    return _SPEC[0]


_SPEC: list[bytes] = []


@routes.get("/api/v1/master")
async def master(request: web.Request) -> web.Response:
    s = request.app[keys.SETTINGS]
    return json_response(serialize.master_info(request.app[keys.CLUSTER_ID], s.cluster_name))


@routes.post("/api/v1/auth/login")
@op(body=LoginBody)
async def login(request: web.Request) -> web.Response:
    body = await parse(request, LoginBody)
    db = request.app[keys.DB]
    user = await db.run(users.by_name, body.username)
    hashed = body.password if body.is_hashed else users.client_hash(body.password)
    if user is None or not users.password_matches(user, hashed):
        raise Unauthenticated("invalid credentials")
    if not user.active:
        raise PermissionDenied("user is not active")
    token = await db.run(users.new_session, user.id, request.app[keys.SETTINGS].session_lifetime)
    return json_response({"token": token, "user": user_json(user)})


@routes.post("/api/v1/auth/logout")
async def logout(request: web.Request) -> web.Response:
    await request.app[keys.DB].run(users.drop_session, principal(request).token)
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
    found = await request.app[keys.DB].read(users.list_, query_bool(request, "active"))
    page, pagination = paginate([user_json(u) for u in found], request)
    return json_response({"users": page, "pagination": pagination})


@routes.get("/api/v1/users/{id}")
async def get_user(request: web.Request) -> web.Response:
    user = await request.app[keys.DB].run(users.by_id, path_int(request, "id"))
    return json_response({"user": user_json(user)})


@routes.get("/api/v1/users/{username}/by-username")
async def get_user_by_name(request: web.Request) -> web.Response:
    name = request.match_info["username"]
    user = await request.app[keys.DB].run(users.by_name, name)
    if user is None:
        raise NotFound(f"user '{name}' not found")
    return json_response({"user": user_json(user)})


@routes.post("/api/v1/users")
@op(body=PostUserBody)
async def create_user(request: web.Request) -> web.Response:
    """A new user (`det user create`, `dettui user create`): admins only."""
    require_admin(request)
    body = await parse(request, PostUserBody)
    new = body.user
    name = new.username.strip()
    if not name or len(name) > 128 or any(c.isspace() or c == "/" for c in name):
        raise InvalidArgument("user.username: 1 to 128 characters, without spaces or '/'")
    hashed = "" if body.password is None else (
        body.password if body.is_hashed else users.client_hash(body.password))
    user = await request.app[keys.DB].run(
        users.create, name, hashed, admin=bool(new.admin), active=new.active is not False,
        display_name=new.display_name)
    return json_response({"user": user_json(user)})


@routes.patch("/api/v1/users/{id}")
@op(body=PatchUserBody)
async def patch_user(request: web.Request) -> web.Response:
    """Change a user (`det user activate|deactivate|change-password|edit`): admins change
    anyone; a user only their own password and display name."""
    me_ = require_user(request)
    user_id = path_int(request, "id")
    body = await parse(request, PatchUserBody)
    if user_id != me_.id or body.active is not None or body.admin is not None:
        require_admin(request)
    if body.username is not None or body.remote:
        raise InvalidArgument("renaming users and remote users are not supported by dettui")
    hashed = None
    if body.password is not None:
        hashed = body.password if body.is_hashed else users.client_hash(body.password)
    user = await request.app[keys.DB].run(
        users.update, user_id, active=body.active, admin=body.admin,
        display_name=body.display_name, hashed_password=hashed)
    return json_response({"user": user_json(user)})


@routes.post("/api/v1/users/{username}/password")
@op(body=PasswordBody)
async def set_password(request: web.Request) -> web.Response:
    """Admins set anyone's password; users their own. Body: the raw JSON string or {password}."""
    target = request.match_info["username"]
    if require_user(request).username != target:
        require_admin(request)
    raw = await read_json(request)
    password = raw.get("password", "") if isinstance(raw, dict) else raw
    if not isinstance(password, str):
        raise InvalidArgument("password: must be a string")
    await request.app[keys.DB].run(users.set_password, target, users.client_hash(password))
    return json_response({})
