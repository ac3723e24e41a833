"""Experiments: create (config + model definition), list, get, control, trials, checkpoints."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dettui import metric
from dettui.config.schema import priority_value, weight_value
from dettui.errors import FailedPrecondition, InvalidArgument
from dettui.master import checkpoint_gc, experiment_intake, offload
from dettui.master.checkpoint_policy import GcPolicy
from dettui.master.experiment_intake import Intake
from dettui.master.http import appkeys, shapes, unsupported
from dettui.master.http.body import body_chunks, read_json
from dettui.master.http.middleware import principal, require_owner, require_user, task_route
from dettui.master.http.openapi import op
from dettui.master.http.requests import (
    ContinueExperimentBody,
    CreateExperimentBody,
    PatchExperimentBody,
    checked,
    parse,
    parse_obj,
)
from dettui.master.http.wire import (
    b64_response,
    big_json_response,
    json_bytes,
    json_response,
    page_of,
    path_int,
    query_bool,
    query_int,
    ts,
)
from dettui.master.store import control
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.store import trials as trial_store
from dettui.master.store import unmanaged as unmanaged_store
from dettui.master.store.page import Page
from dettui.master.store.records import Experiment
from dettui.master.views import checkpoints as checkpoint_views
from dettui.master.views.experiments import extras
from dettui.master.views.trials import trial_views
from dettui.models import ExperimentState

log = logging.getLogger("dettui.master.experiments")
routes = web.RouteTableDef()
DEFAULT_PRIORITY = 42
MAX_CREATE_BODY = 140 * 1024 * 1024  # a 95 MiB context arrives base64-encoded inside JSON


async def _intake(request: web.Request, by_external_id: bool = False) -> Intake:
    """The create body, read and prepared in a worker process (never on the event loop)."""
    settings = request.app[appkeys.SETTINGS]
    return await offload.isolated_body(experiment_intake.read_create, body_chunks(request),
                                       str(settings.checkpoint_root), str(settings.state_dir),
                                       by_external_id)


@routes.post("/api/v1/experiments")
@op(body=CreateExperimentBody, max_body=MAX_CREATE_BODY)
async def create(request: web.Request) -> web.Response:
    got = await _intake(request)
    unsupported.template(got.body.template)
    user = require_user(request)
    if got.body.unmanaged:
        return await _create_unmanaged(request, got, None)
    conf = got.conf
    pool = await _pool(request, conf)
    resources = conf["resources"]
    priority = resources.get("priority") or DEFAULT_PRIORITY
    resources["priority"] = priority
    resources["resource_pool"] = pool
    new = exp_store.NewExperiment(
        name=conf["name"], description=conf.get("description"), labels=conf.get("labels") or [],
        owner_id=user.id, config=conf, original_config=got.body.config,
        searcher_type=conf["searcher"]["name"], resource_pool=pool, priority=int(priority),
        weight=float(resources.get("weight") or 1), max_slots=resources.get("max_slots"),
        context=got.targz, activate=got.body.activate is not False,
    )
    if got.body.validate_only:
        return json_response({"experiment": _preview(new, user.username), "config": None,
                              "warnings": [], "configWarnings": got.warnings})
    assert got.opening is not None  # a managed experiment's, read with its body
    exp, _ = await request.app[appkeys.CREATIONS].one((new, got.opening))  # told, kicked
    return json_response({"experiment": shapes.experiment(exp), "config": exp.config,
                          "warnings": [], "configWarnings": got.warnings})


@routes.put("/api/v1/experiments/by-external-id/{externalId}")
@op(body=CreateExperimentBody, max_body=MAX_CREATE_BODY)
async def put_by_external_id(request: web.Request) -> web.Response:
    """Create an unmanaged experiment, or return the caller's own already known by that
    external id (another user's experiment of the same external id is never found)."""
    got = await _intake(request, by_external_id=True)
    external_id = request.match_info["externalId"].strip()
    if not external_id:
        raise InvalidArgument("externalExperimentId: must not be empty")
    return await _create_unmanaged(request, got, external_id)


async def _create_unmanaged(request: web.Request, got: Intake,
                            external_id: str | None) -> web.Response:
    """A detached experiment (WIRE §8): no model definition, no job, never scheduled."""
    user = require_user(request)
    settings = request.app[appkeys.SETTINGS]
    conf = got.conf
    conf["resources"]["resource_pool"] = settings.default_pool
    conf["resources"]["priority"] = conf["resources"].get("priority") or DEFAULT_PRIORITY
    new = exp_store.NewExperiment(
        name=conf["name"], description=conf.get("description"), labels=conf.get("labels") or [],
        owner_id=user.id, config=conf, original_config=got.body.config,
        searcher_type=conf["searcher"]["name"], resource_pool=settings.default_pool,
        priority=int(conf["resources"]["priority"]), weight=1.0, max_slots=None, context=None,
        activate=False, unmanaged=True,
    )
    if got.body.validate_only:
        return json_response({"experiment": _preview(new, user.username), "config": None,
                              "warnings": [], "configWarnings": got.warnings})
    exp = await request.app[appkeys.CLUSTER].dispatcher.run(unmanaged_store.create_experiment,
                                                            new, external_id)
    assert exp is not None
    return json_response({"experiment": shapes.experiment(exp), "config": exp.config,
                          "warnings": [], "configWarnings": got.warnings})


async def _pool(request: web.Request, conf: dict[str, Any]) -> str:
    settings = request.app[appkeys.SETTINGS]
    name = conf["resources"].get("resource_pool") or settings.default_pool
    known = set(settings.pools) | request.app[appkeys.CLUSTER].agents.pools()
    if name not in known:
        raise InvalidArgument(
            f"resources.resource_pool: resource pool '{name}' not found "
            f"(known pools: {', '.join(sorted(known))})"
        )
    return str(name)


def _preview(new: exp_store.NewExperiment, username: str) -> dict[str, Any]:
    return {"id": 0, "name": new.name, "archived": False, "config": new.config,
            "jobId": "", "numTrials": 0, "originalConfig": new.original_config,
            "projectId": 1, "projectOwnerId": 1, "searcherType": new.searcher_type,
            "startTime": None, "state": ExperimentState.ACTIVE.value, "username": username}


@routes.get("/api/v1/experiments")
@op(query={"archived": bool, "users": list[str], "states": list[str], "sortBy": str,
           "omitConfig": bool}, paged=True)
async def list_(request: web.Request) -> web.Response:
    """A page of experiments, read with LIMIT/OFFSET (Determined's pagination). dettui's own
    clients ask with `omitConfig=true` (not Determined's): without `config` and
    `originalConfig`, two thirds of each experiment's JSON that a list does not show."""
    body = await request.app[appkeys.DB].read(
        _list_body, page_of(request), not query_bool(request, "omitConfig"),
        archived=query_bool(request, "archived"),
        users=request.query.getall("users", []) or None,
        states=request.query.getall("states", []) or None,
        sort_by=request.query.get("sortBy") or None)
    return web.Response(body=body, content_type="application/json")


def _list_body(conn: sqlite3.Connection, want: Page, config: bool, **query: Any) -> bytes:
    """A page's JSON, read, built and encoded in one call on a reader connection (one hop
    off the event loop, not one per step)."""
    if config:
        exps, window = exp_store.page(conn, want, **query)
        out = [shapes.experiment(e) for e in exps]
    else:
        listed, window = exp_store.listed_page(conn, want, **query)
        out = [shapes.listed_experiment(e) for e in listed]
    return json_bytes({"experiments": out, "pagination": window.pagination()})


@routes.get("/api/v1/experiments/{id}")
async def get(request: web.Request) -> web.Response:
    exp, more = await request.app[appkeys.DB].read(_with_extras, path_int(request, "id"))
    return json_response({"experiment": shapes.experiment(exp) | more,
                          "config": exp.config, "jobSummary": None})


def _with_extras(conn: sqlite3.Connection, exp_id: int) -> tuple[Experiment, dict[str, Any]]:
    exp = exp_store.get(conn, exp_id)
    return exp, extras(conn, exp)


@routes.patch("/api/v1/experiments/{id}")
@op(body=PatchExperimentBody)
async def patch(request: web.Request) -> web.Response:
    exp_id = path_int(request, "id")
    raw = await read_json(request)
    body = parse_obj(raw, PatchExperimentBody)
    assert isinstance(raw, dict)
    db = request.app[appkeys.DB]
    exp = await db.read(exp_store.get, exp_id)
    require_owner(request, exp.owner_id, f"experiment {exp_id}")
    fields: dict[str, Any] = {}
    if body.name is not None:
        if not body.name.strip():
            raise InvalidArgument("name: must not be empty")
        fields["name"] = body.name
    if body.description is not None:
        fields["description"] = body.description
    if body.labels is not None:
        fields["labels"] = body.labels
    resources = raw.get("resources") if isinstance(raw, dict) else None
    if isinstance(resources, dict):
        fields.update(_resource_changes(resources))
    storage = raw.get("checkpointStorage") if isinstance(raw, dict) else None
    # A new GC policy applies at once (0.38.1 used the old one): the same command collects.
    gc_policy = _gc_policy(storage, checkpoint_gc.policy_of(exp)) \
        if isinstance(storage, dict) else None
    if fields or gc_policy is not None:
        exp = await request.app[appkeys.CLUSTER].dispatcher.run(
            exp_store.update_fields, exp_id, gc_policy=gc_policy, **fields)
        assert exp is not None
    return json_response({"experiment": shapes.experiment(exp)})


def _gc_policy(raw: dict[str, Any], old: GcPolicy) -> GcPolicy:
    values = {}
    for camel, snake in (("saveExperimentBest", "save_experiment_best"),
                         ("saveTrialBest", "save_trial_best"),
                         ("saveTrialLatest", "save_trial_latest")):
        v = raw.get(camel, raw.get(snake))
        if v is None:
            values[snake] = getattr(old, snake)
        elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidArgument(f"checkpointStorage.{camel}: must be an integer >= 0")
        else:
            values[snake] = v
    return GcPolicy(**values)


@op(query={"save_experiment_best": int, "save_trial_best": int, "save_trial_latest": int})
async def preview_gc(request: web.Request) -> web.Response:
    """What a policy would delete (`det e set gc-policy` without --yes)."""
    exp_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    exp = await db.read(exp_store.get, exp_id)
    old = checkpoint_gc.policy_of(exp)
    policy = GcPolicy(*(query_int(request, k, getattr(old, k)) for k in (
        "save_experiment_best", "save_trial_best", "save_trial_latest")))
    doomed = await db.read(checkpoint_gc.plan, exp, policy)
    return json_response({
        "checkpoints": [_go_checkpoint(c) for c in doomed],
        "metric_name": exp.searcher_metric})


def _go_checkpoint(c: Any) -> dict[str, Any]:
    size = sum(int(v) for v in c.resources.values() if str(v).isdigit())
    return {"UUID": c.uuid, "TaskID": c.task_id, "AllocationID": c.allocation_id,
            "ReportTime": ts(c.report_time), "State": c.state.value.removeprefix("STATE_"),
            "Resources": c.resources, "Metadata": c.metadata, "Size": size,
            "TrialID": c.trial_id, "ExperimentID": c.experiment_id,
            "StepsCompleted": c.steps_completed, "ValidationMetrics": None,
            "SearcherMetric": None}


routes.get("/experiments/{id}/preview_gc")(preview_gc)


def _resource_changes(resources: dict[str, Any]) -> dict[str, Any]:
    """PATCH resources: the priority, weight and max slots columns (their one home)."""
    out: dict[str, Any] = {}
    if resources.get("priority") is not None:
        out["priority"] = checked(priority_value, resources["priority"], "resources.priority")
    if resources.get("weight") is not None:
        out["weight"] = checked(weight_value, resources["weight"], "resources.weight")
    if resources.get("maxSlots") is not None:
        m = resources["maxSlots"]
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise InvalidArgument("resources.maxSlots: must be an integer >= 0")
        out["max_slots"] = m
    return out


async def _action(request: web.Request, action: str) -> web.Response:
    exp_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    cluster = request.app[appkeys.CLUSTER]
    exp = await db.read(exp_store.get, exp_id)
    require_owner(request, exp.owner_id, f"experiment {exp_id}")
    if exp.unmanaged and action in ("pause", "activate", "cancel", "kill"):
        return await _unmanaged_action(request, exp, action)
    if action == "pause":
        await cluster.dispatcher.run(control.stop, exp_id, ExperimentState.PAUSED)
    elif action == "activate":
        await cluster.dispatcher.run(control.activate, exp_id)
    elif action == "cancel":
        await cluster.dispatcher.run(control.stop, exp_id, ExperimentState.STOPPING_CANCELED)
    elif action == "kill":
        await cluster.dispatcher.run(control.stop, exp_id, ExperimentState.STOPPING_KILLED)
    elif action in ("archive", "unarchive"):  # the state is checked in its transaction
        await cluster.dispatcher.run(exp_store.set_archived, exp_id, action == "archive")
    return json_response({})


@routes.post("/api/v1/experiments/continue")
@op(body=ContinueExperimentBody)
async def continue_experiment(request: web.Request) -> web.Response:
    """`det e continue ID [--config K=V]`: an ended experiment trains on from its trials'
    latest checkpoints, with the override merged into its config."""
    body = await parse(request, ContinueExperimentBody)
    db = request.app[appkeys.DB]
    exp = await db.read(exp_store.get, body.id)
    require_owner(request, exp.owner_id, f"experiment {exp.id}")
    if exp.unmanaged:
        raise FailedPrecondition(f"experiment {exp.id} is unmanaged: run its script again")
    conf = await offload.cpu(experiment_intake.continue_config, exp.config, body.override_config)
    await request.app[appkeys.CLUSTER].dispatcher.run(control.continue_experiment, exp.id, conf)
    exp = await db.read(exp_store.get, exp.id)
    return json_response({"experiment": shapes.experiment(exp), "config": exp.config})


async def _unmanaged_action(request: web.Request, exp: Any, action: str) -> web.Response:
    """A detached script cannot be reached: pause/activate are refused; cancel and kill end
    every trial that has not ended as CANCELED."""
    exp_id = exp.id
    if action in ("pause", "activate"):
        raise FailedPrecondition(f"experiment {exp_id} is unmanaged: its script runs outside "
                                 f"the cluster, so it cannot be {action}d from here")
    if exp.state.is_terminal():
        return json_response({})
    await request.app[appkeys.CLUSTER].dispatcher.run(unmanaged_store.cancel, exp_id)
    return json_response({})


@routes.delete("/api/v1/experiments/{id}")
async def delete(request: web.Request) -> web.Response:
    """Delete an ended experiment for good: marked `deleting` (so no `continue` runs it
    again), its checkpoint files removed, then its trials, metrics, logs and records in one
    transaction. Interrupted, the master finishes the deletion when it starts again."""
    exp_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    exp = await db.read(exp_store.get, exp_id)
    require_owner(request, exp.owner_id, f"experiment {exp_id}")
    await request.app[appkeys.CLUSTER].dispatcher.run(exp_store.begin_delete, exp_id)
    removed = await checkpoint_gc.remove_all(db, exp)
    await request.app[appkeys.CLUSTER].dispatcher.run(exp_store.delete, exp_id)
    log.info("experiment %d deleted with %d checkpoint(s)", exp_id, removed)
    return json_response({})


for _name in ("pause", "activate", "cancel", "kill", "archive", "unarchive"):

    async def _handler(request: web.Request, _a: str = _name) -> web.Response:
        return await _action(request, _a)

    routes.post(f"/api/v1/experiments/{{id}}/{_name}")(_handler)


@routes.get("/api/v1/experiments/{id}/trials")
@op(query={"states": list[str], "sortBy": str}, paged=True)
async def trials(request: web.Request) -> web.Response:
    """A page of the experiment's trials, read with LIMIT/OFFSET."""
    body = await request.app[appkeys.DB].read(
        _trials_body, path_int(request, "id"), page_of(request),
        states=request.query.getall("states", []) or None,
        sort_by=request.query.get("sortBy") or None,
        resources=request.app[appkeys.CLUSTER].agents.trial_usage.views)
    return web.Response(body=body, content_type="application/json")


def _trials_body(conn: sqlite3.Connection, exp_id: int, want: Page,
                 resources: Mapping[int, dict[str, Any]] | None = None, **query: Any) -> bytes:
    """A page of an experiment's trials as JSON, in one call on a reader connection."""
    exp = exp_store.get(conn, exp_id)
    rows, window = trial_store.page(conn, exp_id, want, **query)
    return json_bytes({"trials": trial_views(conn, exp, rows, resources),
                       "pagination": window.pagination()})


@routes.get("/api/v1/experiments/{id}/checkpoints")
@op(query=checkpoint_views.LIST_QUERY, paged=True)
async def checkpoints(request: web.Request) -> web.Response:
    exp_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    exp = await db.read(exp_store.get, exp_id)
    return await big_json_response(await checkpoint_views.listed(
        db, page_of(request), request.query, exp))


@routes.get("/api/v1/experiments/{id}/model_def")
async def model_def(request: web.Request) -> web.Response:
    data = await request.app[appkeys.DB].read(exp_store.context, path_int(request, "id"))
    return await b64_response("b64Tgz", data)


@task_route
async def best_validation(request: web.Request) -> web.Response:
    exp_id = path_int(request, "id")
    db = request.app[appkeys.DB]
    p = principal(request)
    exp = await db.read(exp_store.get, exp_id)
    if p.allocation is not None:
        trial = await db.read(trial_store.get, p.allocation.trial_id)
        if trial.experiment_id != exp_id:
            from dettui.errors import PermissionDenied

            raise PermissionDenied("this allocation's token is not valid for that experiment")
    best = await db.read(best_metric, exp)
    if best is None:
        from dettui.errors import NotFound

        raise NotFound(f"no validation metrics for experiment {exp_id} yet")
    return json_response({"metric": best})


def best_metric(conn: Any, exp: Experiment) -> float | None:
    name = exp.searcher_metric
    trial_ids = [t.id for t in trial_store.for_experiment(conn, exp.id)]
    values = [metric.number(m.metrics, name)
              for m in metric_store.validations_with(conn, trial_ids, name)]
    return metric.best(values, lambda v: v, exp.smaller_is_better)


routes.get("/api/v1/experiments/{id}/searcher/best_searcher_validation_metric")(best_validation)
