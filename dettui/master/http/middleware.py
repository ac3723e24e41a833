"""Errors become Determined-shaped JSON bodies; every request but a few needs a token.

Who may do what, once known who calls: users read every trial; a trial is written only by
its own allocation's token, or, detached, by its owner or an admin (`require_trial_writer`);
users change what they own, admins everything (`require_owner`); an agent credential speaks
only the agent protocol, for its own agent (`require_agent`).

A trial's DET_USER_TOKEN is its owner's session while the trial runs (as in Determined), for
the CLI and SDK inside it: it reads and creates what its owner may, but whatever would outlive
the trial or widen anyone's access (a password, a user, a linked agent user, an agent
credential) is refused to it (`not_for_trials`): code planted in a trial must not keep the
account after the allocation ends. Determined's task sessions are plain user sessions that can
do all of that; dettui's are marked (`user_sessions.allocation_id`, `Principal.trial_session`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from dettui.errors import (
    DettuiError,
    PermissionDenied,
    Unauthenticated,
)
from dettui.master.http import appkeys, unsupported
from dettui.master.http.principal import Principal
from dettui.master.http.wire import json_response
from dettui.master.store import callers, credentials
from dettui.master.store import experiments as exp_store
from dettui.master.store import trials as trial_store
from dettui.master.store.credentials import AgentCredential
from dettui.master.store.records import User

log = logging.getLogger("dettui.master")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# No sign-in needed (WIRE §1): the CLI reads /api/v1/master unauthenticated (rbacEnabled)
PUBLIC = {("GET", "/info"), ("POST", "/api/v1/auth/login"), ("GET", "/api/v1/master")}
# WebSocket clients that cannot set headers may pass their token as `?token=` here (only here:
# a token in a URL ends up in logs and histories).
QUERY_TOKEN_PATHS = {"/api/v1/stream"}
# Handlers a task's allocation token may call; each still checks the trial/allocation is its own.
TASK_HANDLERS: set[Handler] = set()
# The agent protocol: only an agent credential reaches these, and it reaches nothing else
# (but for AGENT_TOO, which users and allocations may call as well).
AGENT_HANDLERS: set[Handler] = set()
AGENT_TOO: set[Handler] = set()
# Handlers a trial's session (DET_USER_TOKEN) may not call, with what each does.
NOT_FOR_TRIALS: dict[Handler, str] = {}


def task_route(handler: Handler) -> Handler:
    """Mark a handler as callable with an allocation (DET_SESSION_TOKEN) token."""
    TASK_HANDLERS.add(handler)
    return handler


def agent_route(handler: Handler) -> Handler:
    """Mark a handler as part of the agent protocol: agent credentials only."""
    AGENT_HANDLERS.add(handler)
    return handler


def agent_too(handler: Handler) -> Handler:
    """Mark a handler that agents may call with their credential besides its usual callers."""
    AGENT_TOO.add(handler)
    return handler


def not_for_trials(what: str) -> Callable[[Handler], Handler]:
    """Mark a handler that a trial's session (its DET_USER_TOKEN) may not call, because what
    it does (`what`: "change a password") would outlive the trial or widen access."""

    def mark(handler: Handler) -> Handler:
        NOT_FOR_TRIALS[handler] = what
        return handler

    return mark


def error_response(exc: DettuiError, request: web.Request) -> web.Response:
    body: dict[str, object] = {"message": exc.message}
    if request.path.startswith(("/api/", "/resources/")):  # the CLI reads `error.error`
        body["error"] = {"code": exc.grpc_code, "reason": exc.grpc_reason, "error": exc.message}
    resp = json_response(body, status=exc.http_status)
    if exc.retry_after is not None:  # a full disk: clients send the same request again later
        resp.headers["Retry-After"] = str(exc.retry_after)
    return resp


@web.middleware
async def not_found(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every 404 on /api/v1/ is logged, one line with the method, path and client: a client
    asking for a route the master lacks shows up in its log (the compat tests watch for it).
    The path and client name are cut short, so a flood of 404s fills the log ring with short
    lines."""
    resp = await handler(request)
    if resp.status == 404 and request.path.startswith("/api/v1/"):
        log.info("404 %s %s (%s)", one_line(request.method, 20),
                 one_line(request.rel_url.raw_path, 200),
                 one_line(request.headers.get("User-Agent", "-"), 80))
    return resp


def one_line(text: str, cap: int = 300) -> str:
    """`text` for a log line: control and non-ASCII characters escaped, at most `cap` long."""
    escaped = text.encode("unicode_escape").decode("ascii")
    return escaped if len(escaped) <= cap else escaped[:cap] + "..."


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except DettuiError as exc:
        return error_response(exc, request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason if exc.status != 404 else f"no such route: {request.path}"
        err = DettuiError(message)
        err.http_status = exc.status
        err.grpc_code = 5 if exc.status == 404 else 3
        err.grpc_reason = "NotFound" if exc.status == 404 else "InvalidArgument"
        return error_response(err, request)
    except ConnectionResetError:  # aiohttp's ClientConnectionResetError too
        # The client went away while its response was written (Ctrl-C on `t logs -f`, a
        # closed dashboard): normal, not the master's error. Nobody reads what is returned.
        log.info("client left during %s %s", request.method, one_line(request.path))
        return web.Response(status=499)
    except Exception as exc:  # noqa: BLE001 - the master never crashes on a request
        log.exception("internal error on %s %s", request.method, request.path)
        return error_response(DettuiError(f"internal error: {exc}"), request)


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@web.middleware
async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    unsupported.check(request.path, request.method)  # 501 saying what to use, signed in or not
    if (request.method, request.path) in PUBLIC or request.method == "OPTIONS":
        return await handler(request)
    principal = await _principal(request)
    if principal is None:
        task_token = _bearer(request.headers.get("Grpc-Metadata-x-allocation-token"))
        ended = task_token and await request.app[appkeys.DB].read(callers.ended_task, task_token)
        raise Unauthenticated(ended or "invalid credentials: log in first (dettui user login)")
    route_handler = request.match_info.handler
    if principal.agent is not None:
        if route_handler not in AGENT_HANDLERS and route_handler not in AGENT_TOO:
            raise PermissionDenied("an agent credential may only be used for the agent protocol")
    elif route_handler in AGENT_HANDLERS:
        raise PermissionDenied("the agent protocol needs an agent credential, not a user's "
                               "token: an admin issues one with `dettui agent token create`")
    if principal.user is not None and not principal.user.active:
        raise PermissionDenied("user is not active")
    if principal.allocation is not None and route_handler not in TASK_HANDLERS:
        raise PermissionDenied("an allocation token may only reach its own trial and allocation")
    if principal.trial_session is not None and route_handler in NOT_FOR_TRIALS:
        raise PermissionDenied(
            f"a trial's session (DET_USER_TOKEN, its owner's while the trial runs) cannot "
            f"{NOT_FOR_TRIALS[route_handler]}: that would outlive the trial. Log in as the "
            "user (dettui user login) to do this")
    request[appkeys.PRINCIPAL] = principal
    return await handler(request)


async def _principal(request: web.Request) -> Principal | None:
    """Who is calling: a trial's allocation (revoked once the allocation exits), an agent (its
    credential), or a user (an unexpired session). Callers the store has read before are
    remembered (`store.callers`) until a change to them, so most requests skip the store."""
    db = request.app[appkeys.DB]
    known = db.callers
    task_token = _bearer(request.headers.get("Grpc-Metadata-x-allocation-token"))
    token = _bearer(request.headers.get("Authorization"))
    if token is None and request.path in QUERY_TOKEN_PATHS:
        token = request.query.get("token") or None
    if task_token:
        found = (known and known.task(task_token)) or await db.run(callers.task, known,
                                                                   task_token)
        if found is not None:
            return Principal(found[1], task_token, found[0])
    if token and token.startswith(credentials.PREFIX):
        cred = (known and known.agent(token)) or await db.run(callers.agent, known, token)
        return Principal(None, token, agent=cred) if cred is not None else None
    if token:
        found_session = (known and known.session(token)) or await db.run(callers.session, known,
                                                                          token)
        if found_session is not None:
            return Principal(found_session.user, token,
                             trial_session=found_session.allocation_id)
    return None


def principal(request: web.Request) -> Principal:
    return request[appkeys.PRINCIPAL]


def check_trial(request: web.Request, trial_id: int) -> None:
    """Reading a trial: a task token may read only its own trial (users read every trial).
    Writes go through `require_trial_writer`."""
    p = principal(request)
    if p.allocation is not None and p.allocation.trial_id != trial_id:
        raise PermissionDenied(f"this allocation's token is not valid for trial {trial_id}")


def check_allocation(request: web.Request, alloc_id: str) -> None:
    """Reading an allocation (its preemption long-poll): a task token only its own."""
    p = principal(request)
    if p.allocation is not None and p.allocation.id != alloc_id:
        raise PermissionDenied(f"this allocation's token is not valid for allocation {alloc_id}")


async def require_trial_writer(request: web.Request, trial_id: int | None,
                               allocation_id: str | None = None) -> None:
    """Who may write to a trial (metrics, progress, early exit, runner state, logs, checkpoint
    reports, preemption signals and acks): the trial's own live allocation, by its token
    (DET_SESSION_TOKEN, which the real `determined` client sends inside a trial as
    `Grpc-Metadata-x-allocation-token`); for an unmanaged (detached) trial, which has no
    allocation, its experiment's owner or an admin with a user's token. A user's token, even an
    admin's, never writes to a trial the cluster runs: its reports would mix with the trial's
    own. An exited allocation's token is refused before this (401, `_principal`). With
    `allocation_id` (an allocation's route; `trial_id` may then be None), the token must be that
    allocation's."""
    p = principal(request)
    if p.allocation is not None:
        if trial_id not in (None, p.allocation.trial_id) or \
                allocation_id not in (None, p.allocation.id):
            what = f"allocation {allocation_id}" if allocation_id else f"trial {trial_id}"
            raise PermissionDenied(f"this allocation's token may only write to its own trial "
                                   f"and allocation, not to {what}")
        return
    user = require_user(request)
    db = request.app[appkeys.DB]
    if trial_id is None:
        assert allocation_id is not None
        trial_id = (await db.read(trial_store.allocation, allocation_id)).trial_id
    trial = await db.read(trial_store.get, trial_id)
    exp = await db.read(exp_store.get, trial.experiment_id)
    if not exp.unmanaged:
        raise PermissionDenied(
            f"trial {trial_id} is run by the cluster: only its own allocation's token "
            "(DET_SESSION_TOKEN) may write to it; a user's token may read it")
    if not user.admin and user.id != exp.owner_id:
        raise PermissionDenied(f"only the owner of experiment {exp.id} or an admin may write "
                               f"to its trial {trial_id}")


def require_user(request: web.Request) -> User:
    user = principal(request).user
    if user is None:
        raise PermissionDenied("this needs a user's token")
    return user


def require_admin(request: web.Request) -> User:
    user = require_user(request)
    if not user.admin:
        raise PermissionDenied("only an admin may do this")
    return user


def require_owner(request: web.Request, owner_id: int, what: str) -> User:
    """The caller owns `what` or is an admin (Determined's basic authorisation)."""
    user = require_user(request)
    if not user.admin and user.id != owner_id:
        raise PermissionDenied(f"only the owner of {what} or an admin may change it")
    return user


def require_agent(request: web.Request, agent_id: str,
                  registering: bool = False) -> AgentCredential:
    """The calling agent's credential, which must be the one of `agent_id` (bound at its first
    registration): one agent cannot act as another. A credential not yet bound speaks for no
    agent: registering is all it may do."""
    cred = principal(request).agent
    if cred is None:
        raise PermissionDenied("the agent protocol needs an agent credential")
    if cred.agent_id is None and not registering:
        raise PermissionDenied(f"this agent credential has not registered as agent {agent_id} "
                               "(nor as any agent): it registers first")
    if cred.agent_id is not None and cred.agent_id != agent_id:
        raise PermissionDenied(f"this agent credential belongs to agent {cred.agent_id}, "
                               f"not {agent_id}")
    return cred
