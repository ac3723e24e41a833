"""/info, login, the current user, and the master's identity."""

from __future__ import annotations

import json

from aiohttp import web

from dettui.errors import PermissionDenied, Unauthenticated
from dettui.master import keys, openapi, serialize
from dettui.master.bodies import LoginBody, PasswordBody, parse
from dettui.master.middleware import principal, require_admin, task_route
from dettui.master.openapi import op
from dettui.master.store import users
from dettui.master.store.records import User
from dettui.master.wire import paginate, path_int, query_bool

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
    return web.json_response(body)


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
    return web.json_response(serialize.master_info(request.app[keys.CLUSTER_ID], s.cluster_name))


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
    token = await db.run(users.new_session, user.id)
    return web.json_response({"token": token, "user": user_json(user)})


@routes.post("/api/v1/auth/logout")
async def logout(request: web.Request) -> web.Response:
    await request.app[keys.DB].run(users.drop_session, principal(request).token)
    return web.json_response({})


@task_route
async def me(request: web.Request) -> web.Response:
    return web.json_response({"user": user_json(principal(request).user)})


routes.get("/api/v1/me")(me)
routes.get("/api/v1/auth/user")(me)


@routes.get("/api/v1/users")
@op(query={"active": bool}, paged=True)
async def list_users(request: web.Request) -> web.Response:
    """Every user (`det user list`), `active=true|false` to filter, paginated."""
    found = await request.app[keys.DB].run(users.list_, query_bool(request, "active"))
    page, pagination = paginate([user_json(u) for u in found], request)
    return web.json_response({"users": page, "pagination": pagination})


@routes.get("/api/v1/users/{id}")
async def get_user(request: web.Request) -> web.Response:
    user = await request.app[keys.DB].run(users.by_id, path_int(request, "id"))
    return web.json_response({"user": user_json(user)})


@routes.post("/api/v1/users/{username}/password")
@op(body=PasswordBody)
async def set_password(request: web.Request) -> web.Response:
    """Admins set anyone's password; users their own. Body: the raw JSON string or {password}."""
    from dettui.master.middleware import read_json

    target = request.match_info["username"]
    me_ = principal(request).user
    if me_.username != target:
        require_admin(request)
    raw = await read_json(request)
    password = raw.get("password", "") if isinstance(raw, dict) else raw
    if not isinstance(password, str):
        from dettui.errors import InvalidArgument

        raise InvalidArgument("password: must be a string")
    await request.app[keys.DB].run(users.set_password, target, users.client_hash(password))
    return web.json_response({})
