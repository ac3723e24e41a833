"""Reading an experiment-create request: the raw body to a validated, defaulted config and a
packed context. Everything here is CPU-heavy and bounded by caps (body size, config size, YAML
expansion, grid size, context size), and runs in a worker process (`offload.isolated`): decoding
a 130 MB body or base64-decoding a 95 MB context holds the GIL for hundreds of milliseconds,
which must not be the master's.

Pure functions of their arguments, picklable results.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dettui import context as ctx
from dettui.config import load_config, yamlsafe
from dettui.config.schema import ExperimentSchema
from dettui.errors import ConfigError, InvalidArgument, TooLarge
from dettui.launch import entrypoint_files
from dettui.master.http.body import decode_json
from dettui.master.http.requests import CreateExperimentBody, parse_obj
from dettui.master.store.search import Opening, opening
from dettui.paths import exposure
from dettui.storage import storage_paths


@dataclass(frozen=True)
class Intake:
    body: CreateExperimentBody  # as sent, without its modelDefinition
    conf: dict[str, Any]  # the full config
    warnings: list[str]
    targz: bytes | None  # the packed context (None: unmanaged, or validate only)
    opening: Opening | None = None  # its first trials and searcher state (None: as targz)


def read_create(raw: bytes, checkpoint_root: str, state_dir: str,
                by_external_id: bool = False) -> Intake:
    """A POST /api/v1/experiments (or PUT by external id) body, checked and prepared."""
    body = parse_obj(decode_json(raw), CreateExperimentBody)
    if by_external_id and not body.unmanaged:
        raise InvalidArgument("only unmanaged experiments are supported")
    if by_external_id and body.parent_id:
        raise InvalidArgument("can't fork into an unmanaged experiment")
    files = body.model_definition or []
    body = body.model_copy(update={"model_definition": None})
    if body.unmanaged:
        if files:
            raise InvalidArgument("modelDefinition: unmanaged experiments have no model "
                                  "definition (their script runs outside the cluster)")
        conf, warnings = expconf(unmanaged_config(body.config), checkpoint_root, managed=False,
                                 state_dir=state_dir)
        return Intake(body, conf, warnings, None)
    conf, warnings = expconf(body.config, checkpoint_root, managed=True, state_dir=state_dir)
    if ctx.size_of([f for f in files if isinstance(f, dict)]) > ctx.MAX_CONTEXT_SIZE:
        raise TooLarge("model definition exceeds the maximum allowed size 95.0MB")
    files = ctx.validate_v1files(files)
    check_entrypoint(conf, files)
    first = check_searcher(conf)
    if body.validate_only:
        return Intake(body, conf, warnings, None)
    return Intake(body, conf, warnings, ctx.to_targz(files), first)


def expconf(text: str, checkpoint_root: str, managed: bool,
            state_dir: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """A config text as the full config dict (default storage under the master's checkpoint
    root) and its warnings. Checkpoint storage may not reach into the master's state dir (but
    for its checkpoint root): trials are given that path, and GC deletes under it."""
    cfg = load_config(text, source="config", managed=managed)
    conf = cfg.to_expconf()
    if cfg.checkpoint_storage_was_defaulted:
        conf["checkpoint_storage"]["host_path"] = str(Path(checkpoint_root))
        conf["checkpoint_storage"]["storage_path"] = None
    if managed and state_dir is not None:  # an unmanaged trial runs outside: given nothing
        for path in storage_paths(conf):
            why = exposure(path, [state_dir], [checkpoint_root])
            if why is not None:
                raise InvalidArgument(f"checkpoint_storage: {why} (the master's state dir)")
    return conf, list(cfg.warnings)


def unmanaged_config(text: str) -> str:
    """Determined's detached client sends every key, unset ones as null: drop those, then fill
    the defaults of WIRE §8 (name `unmanaged-<8 hex>`, searcher single on metric `unmanaged`).
    Text that is not a YAML mapping is left for the config loader to report."""
    try:
        data = yamlsafe.load(text)
    except (yaml.YAMLError, yamlsafe.YamlTooBig):
        return text
    if not isinstance(data, dict):
        return text
    data = {k: v for k, v in data.items() if v is not None}
    data.setdefault("name", f"unmanaged-{uuid.uuid4().hex[:8]}")
    data.setdefault("searcher", {"name": "single", "metric": "unmanaged"})
    return str(yaml.safe_dump(data, sort_keys=False))


def check_entrypoint(conf: dict[str, Any], files: list[dict[str, Any]]) -> None:
    """Refuse an entrypoint that runs a file the context lacks (`python3 trian.py`), as a
    config error: it would fail on an agent max_restarts + 1 times (entrypoint_files says
    which entrypoints are surely paths; the rest are left alone)."""
    why = entrypoint_files.missing(conf.get("entrypoint"),
                                   ((f["path"], f["type"] == ctx.DIRECTORY) for f in files))
    if why is not None:
        raise ConfigError([why], source="config")


def check_searcher(conf: dict[str, Any]) -> Opening:
    """Refuse a searcher that cannot be built (e.g. ASHA without a time metric) up front; the
    experiment's first trials and searcher state (here, in the worker process, not on the
    store thread)."""
    from dettui.master import searcher

    try:
        return opening(ExperimentSchema.model_validate(conf))
    except (searcher.SearcherError, ValueError) as exc:
        raise InvalidArgument(f"invalid experiment configuration: {exc}") from exc


CONTINUABLE = ("single", "grid", "random")


def continue_config(active: dict[str, Any], override_text: str | None) -> dict[str, Any]:
    """`det e continue`: the experiment's config with the override merged over it (Determined's
    parseAndMergeContinueConfig), checked like a new config. Runs on the CPU pool."""
    name = (active.get("searcher") or {}).get("name")
    if name not in CONTINUABLE:
        raise InvalidArgument(f"Unsupported searcher type provided: '{name}'")
    try:
        override = yamlsafe.load(override_text or "{}") or {}
    except (yaml.YAMLError, yamlsafe.YamlTooBig) as exc:
        raise InvalidArgument(f"parsing override config: {exc}") from exc
    if not isinstance(override, dict):
        raise InvalidArgument("parsing override config: it must be a mapping")
    if override and name != "single":
        raise InvalidArgument("override config is provided and experiment is not single "
                              f"searcher, got '{name}' instead")
    for key in ("project", "workspace"):
        if key in override:
            raise InvalidArgument(f"'{key}' in override config cannot be specified")
    merged = _merge(active, override)
    if name == "single" and (merged.get("searcher") or {}).get("name") != "single":
        raise InvalidArgument("override config must have single searcher type got "
                              f"'{merged['searcher'].get('name')}' instead")
    conf = load_config(yaml.safe_dump(merged), source="override config").to_expconf()
    conf["checkpoint_storage"] = merged["checkpoint_storage"]  # the master's place stays
    conf["resources"] = {**merged.get("resources", {}), **conf["resources"],
                         "resource_pool": merged["resources"].get("resource_pool"),
                         "priority": merged["resources"].get("priority")}
    return conf


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
