"""HTTP routes, one module per resource; `setup(app)` registers them all."""

from __future__ import annotations

from aiohttp import web

from dettui.master.routes import (
    agents,
    checkpoints,
    experiments,
    jobs,
    labels,
    logs,
    master_info,
    metrics,
    preview,
    reports,
    retention,
    runs,
    session,
    stream,
    tasks,
    trials,
    unmanaged,
    usage,
    workspaces,
)


def setup(app: web.Application) -> None:
    # In the order the routes had in one trials module: the OpenAPI document lists a path's
    # methods and its schemas in the order routes are registered (POST then GET
    # /trials/{id}/metrics, GET then PATCH /trials/{id}; the reports' bodies, then the logs',
    # then the detached trials').
    for module in (session, experiments, metrics, reports, trials, logs, unmanaged, runs,
                   checkpoints, jobs, agents, master_info, preview, labels, retention, usage,
                   workspaces, tasks):
        app.router.add_routes(module.routes)
    stream.setup(app)
