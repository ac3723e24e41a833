"""The master's API described as OpenAPI 3.1, generated from what the master is made of: the
routes registered on the app, the pydantic models request bodies are parsed with, and what each
handler declares with `@op` (its body model, query parameters and body size cap).

`GET /api/v1/openapi.json` serves it; the property-based fuzz test drives every operation from it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel

F = TypeVar("F", bound=Callable[..., Any])
MAX_BODY = 16 * 1024 * 1024  # bytes of a request body, unless an operation says otherwise

# A query parameter's type: int, float, bool, str, or a list of one of those (repeatable).
QueryType = Any
PATH_PARAMS: dict[str, dict[str, Any]] = {  # path parameters that are not plain strings
    "id": {"type": "integer", "format": "int64", "minimum": 0},
    "runId": {"type": "integer", "format": "int64", "minimum": 0},
    "uuid": {"type": "string", "format": "uuid"},
}
PAGE: dict[str, QueryType] = {"offset": int, "limit": int, "orderBy": str}


@dataclass(frozen=True)
class Op:
    """What a handler declares of its request."""

    body: type[BaseModel] | type[dict[str, Any]] | type[list[Any]] | None = None
    query: Mapping[str, QueryType] = field(default_factory=dict)
    max_body: int = MAX_BODY
    long_poll: str | None = None  # the query parameter that makes the handler wait


def op(*, body: type[BaseModel] | type[dict[str, Any]] | type[list[Any]] | None = None,
       query: Mapping[str, QueryType] | None = None, paged: bool = False,
       max_body: int = MAX_BODY, long_poll: str | None = None) -> Callable[[F], F]:
    """Declare a handler's request: its body model, query parameters (`paged` adds offset,
    limit and orderBy), the cap on its body size, and the parameter of a long-poll."""
    declared = Op(body, {**(PAGE if paged else {}), **(query or {})}, max_body, long_poll)

    def mark(handler: F) -> F:
        handler.__dict__["openapi_op"] = declared
        return handler

    return mark


def op_of(handler: object) -> Op:
    found = getattr(handler, "openapi_op", None)
    return found if isinstance(found, Op) else Op()


def spec(app: web.Application, public: set[tuple[str, str]],
         task_handlers: set[Any]) -> dict[str, Any]:
    """The OpenAPI document of `app`'s routes."""
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    for route in app.router.routes():
        if route.method in ("HEAD", "*") or route.resource is None:
            continue
        path = route.resource.canonical
        paths.setdefault(path, {})[route.method.lower()] = _operation(
            route.method, path, route.handler, public, task_handlers, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "dettui master", "version": "0.38.1",
                 "description": "Determined's REST wire protocol, as dettui's master speaks it"},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "user": {"type": "http", "scheme": "bearer"},
                "allocation": {"type": "apiKey", "in": "header",
                               "name": "Grpc-Metadata-x-allocation-token"},
            },
        },
    }


def _operation(method: str, path: str, handler: Any, public: set[tuple[str, str]],
               task_handlers: set[Any], schemas: dict[str, Any]) -> dict[str, Any]:
    declared = op_of(handler)
    doc = inspect.getdoc(handler) or ""
    out: dict[str, Any] = {
        "operationId": f"{method.lower()}_{re.sub(r'[^0-9a-zA-Z]+', '_', path).strip('_')}",
        "summary": doc.split("\n\n")[0].replace("\n", " ") or f"{method} {path}",
        "parameters": [*_path_params(path), *_query_params(declared.query)],
        "responses": {
            "200": {"description": "done"},
            "default": {"description": "an error",
                        "content": {"application/json": {"schema": {"$ref": _error(schemas)}}}},
        },
    }
    if (method, path) in public:
        out["security"] = []
    else:
        out["security"] = [{"user": []}] + ([{"allocation": []}] if handler in task_handlers
                                            else [])
    if declared.body is not None:
        out["requestBody"] = {"required": False, "content": {"application/json": {
            "schema": _body_schema(declared.body, schemas)}}}
    out["x-max-body-bytes"] = declared.max_body
    if declared.long_poll:
        out["x-long-poll"] = declared.long_poll
    return out


def _path_params(path: str) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True,
             "schema": PATH_PARAMS.get(name, {"type": "string"})}
            for name in re.findall(r"{(\w+)}", path)]


def _query_params(query: Mapping[str, QueryType]) -> list[dict[str, Any]]:
    out = []
    for name, kind in query.items():
        schema = _scalar(kind)
        origin = getattr(kind, "__origin__", None)
        if origin is list:
            schema = {"type": "array", "items": _scalar(kind.__args__[0])}
        out.append({"name": name, "in": "query", "required": False, "schema": schema,
                    **({"explode": True} if origin is list else {})})
    return out


def _scalar(kind: Any) -> dict[str, Any]:
    return {int: {"type": "integer", "format": "int64"}, float: {"type": "number"},
            bool: {"type": "boolean"}}.get(kind, {"type": "string"})


def _body_schema(body: Any, schemas: dict[str, Any]) -> dict[str, Any]:
    if body is dict:
        return {"type": "object"}
    if body is list:
        return {"type": "array"}
    schema = body.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas[body.__name__] = schema
    return {"$ref": f"#/components/schemas/{body.__name__}"}


def _error(schemas: dict[str, Any]) -> str:
    schemas.setdefault("Error", {"type": "object", "required": ["message"], "properties": {
        "message": {"type": "string"},
        "error": {"type": "object", "properties": {"code": {"type": "integer"},
                                                   "reason": {"type": "string"},
                                                   "error": {"type": "string"}}}}})
    return "#/components/schemas/Error"
