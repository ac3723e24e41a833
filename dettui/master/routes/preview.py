"""`det preview-search CONFIG`: the trials an experiment's searcher would create, without
creating anything (Determined's PreviewHPSearch)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from dettui.config.loader import load_config
from dettui.errors import InvalidArgument
from dettui.master import offload
from dettui.master.http.body import read_json
from dettui.master.http.middleware import require_user
from dettui.master.http.openapi import op
from dettui.master.http.wire import json_response
from dettui.master.searcher import SearcherError
from dettui.master.searcher.preview import simulate

routes = web.RouteTableDef()


@routes.post("/api/v1/preview-hp-search")
@op(body=dict)
async def preview_hp_search(request: web.Request) -> web.Response:
    require_user(request)
    raw = await read_json(request)
    config = raw.get("config") if isinstance(raw, dict) else None
    if not isinstance(config, dict):
        raise InvalidArgument("config: expected the experiment config as an object")
    if not isinstance(config.get("searcher"), dict):
        raise InvalidArgument("invalid experiment configuration; missing searcher")
    return json_response({"summary": await offload.cpu(summary, config)})


def summary(config: dict[str, Any]) -> dict[str, Any]:
    """Determined's SearchSummary of a config: its searcher section with defaults, and the
    trials it plans. A config the master would refuse is refused here with the same words."""
    cfg = load_config(json.dumps(config), source="config", managed=False)  # ConfigError: 400
    try:
        trials = simulate(cfg.schema.searcher, cfg.hyperparameters)
    except (SearcherError, ValueError) as exc:
        raise InvalidArgument(f"invalid experiment configuration: {exc}") from exc
    return {"config": cfg.to_expconf()["searcher"], "trials": trials}
