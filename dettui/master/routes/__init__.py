"""HTTP routes, one module per resource; `setup(app)` registers them all."""

from __future__ import annotations

from aiohttp import web

from dettui.master.routes import (
    agents,
    checkpoints,
    experiments,
    jobs,
    logs,
    metrics,
    runs,
    session,
    stream,
    trials,
)


def setup(app: web.Application) -> None:
    for module in (session, experiments, metrics, logs, trials, runs, checkpoints, jobs,
                   agents):
        app.router.add_routes(module.routes)
    stream.setup(app)
