"""Loading an experiment config: YAML, `--config key=value` overrides, validation with every
problem reported at once (each with its path), Determined's defaults, and warnings."""

from __future__ import annotations

import difflib
import random
import time
import types
import typing
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from dettui.config import hyperparameters as hp
from dettui.config import yamlsafe
from dettui.config.schema import DEFAULT_LOG_POLICIES, ExperimentSchema
from dettui.errors import ConfigError, TooLarge
from dettui.launch.spec import LEGACY_TRIAL

SEARCHERS = ("single", "random", "grid", "adaptive_asha", "async_halving")
RETIRED = ("custom", "adaptive", "adaptive_simple", "sync_halving")
RUNNABLE_STORAGE = ("shared_fs", "directory")
WORDS_A = ("brave", "calm", "eager", "fancy", "gentle", "happy", "jolly", "keen", "lively",
           "merry", "nimble", "proud", "quick", "sunny", "witty", "zesty")
WORDS_B = ("amber", "azure", "coral", "ivory", "jade", "lilac", "olive", "ruby", "sage",
           "teal", "umber", "violet")
WORDS_C = ("otter", "falcon", "badger", "heron", "lynx", "marten", "newt", "panda", "quail",
           "raven", "seal", "tapir", "walrus", "yak", "zebra", "finch")


class ExperimentConfig:
    """A validated config. Attributes mirror the schema; `to_expconf()` is the full dict."""

    def __init__(self, schema: ExperimentSchema, data: dict[str, Any], warnings: list[str],
                 storage_defaulted: bool) -> None:
        self.schema = schema
        self.raw = data
        self.warnings = warnings
        self.checkpoint_storage_was_defaulted = storage_defaulted
        self.hyperparameters = hp.normalize(schema.hyperparameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.schema, name)

    def to_expconf(self) -> dict[str, Any]:
        conf = self.schema.model_dump(mode="json")
        conf["hyperparameters"] = self.hyperparameters
        searcher = conf["searcher"]
        if isinstance(self.schema.searcher.max_length, BaseModel):
            searcher["max_length"] = self.schema.searcher.max_length.as_dict()  # type: ignore[union-attr]
        for key in ("min_validation_period", "min_checkpoint_period"):
            conf[key] = getattr(self.schema, key).as_dict()
        if conf["log_policies"] is None:
            conf["log_policies"] = [dict(p) for p in DEFAULT_LOG_POLICIES]
        if conf.get("checkpoint_storage"):
            conf["checkpoint_storage"] = storage_expconf(conf["checkpoint_storage"])
        return conf


# The keys of each storage type, as Determined's master sends them (the real package's storage
# managers refuse any other key: `extra key in shared_fs config`).
STORAGE_KEYS = {
    "shared_fs": ("host_path", "container_path", "storage_path", "propagation"),
    "directory": ("container_path",),
    "s3": ("bucket", "access_key", "secret_key", "endpoint_url", "prefix"),
    "gcs": ("bucket", "prefix"),
    "azure": ("container", "connection_string", "account_url"),
}
STORAGE_COMMON = ("type", "save_experiment_best", "save_trial_best", "save_trial_latest")


def storage_expconf(storage: dict[str, Any]) -> dict[str, Any]:
    """`checkpoint_storage` with only its type's keys (and the GC policy)."""
    keys = (*STORAGE_COMMON, *STORAGE_KEYS.get(storage.get("type") or "", ()))
    return {k: storage.get(k) for k in keys}


def load_config_file(path: Path | str, overrides: list[str] | tuple[str, ...] = (),
                     *, managed: bool = True) -> ExperimentConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"cannot read the config file: {exc.strerror}"], str(path)) from exc
    return load_config(text, overrides, str(path), managed=managed)


def load_config(text: str, overrides: list[str] | tuple[str, ...] = (),
                source: str | None = None, *, managed: bool = True,
                now: float | None = None) -> ExperimentConfig:
    data = _parse_yaml(text, source)
    if overrides:
        data = apply_overrides(data, list(overrides), source)
    now = time.time() if now is None else now
    raw_storage = data.get("checkpoint_storage")
    # No storage, or a partial one without a place (`{save_trial_best: 3}`): the master's
    # default storage is merged under it first, as Determined's master does.
    storage_defaulted = raw_storage is None or (
        isinstance(raw_storage, dict) and "type" not in raw_storage
        and "host_path" not in raw_storage)
    data = _with_defaults(data, now)
    problems: list[str] = []
    schema = None
    try:
        schema = ExperimentSchema.model_validate(data)
    except ValidationError as exc:
        problems += _translate(exc, data)
    problems += _semantic_problems(data, managed)
    if problems or schema is None:
        raise ConfigError(_dedupe(problems), source)
    if raw_storage is None:
        schema.checkpoint_storage = _default_storage()
    return ExperimentConfig(schema, data, _warnings(data), storage_defaulted)


def _parse_yaml(text: str, source: str | None) -> dict[str, Any]:
    """The config's YAML within `yamlsafe`'s caps: the text's size (413), the document's size
    once aliases are expanded and its depth (400)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > yamlsafe.MAX_TEXT_BYTES:
        where = f" ({source})" if source else ""
        raise TooLarge(f"the config{where} is {size / 2**20:.1f} MiB, over the limit of "
                       f"{yamlsafe.MAX_TEXT_BYTES / 2**20:.1f} MiB for an experiment config")
    try:
        data = yamlsafe.load(text)
    except yamlsafe.YamlTooBig as exc:
        raise ConfigError([f"the config is too large: {exc}"], source) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"malformed YAML: {where}{problem}"], source) from exc
    if data is None:
        raise ConfigError(["the config is empty"], source)
    if not isinstance(data, dict):
        raise ConfigError([f"the config must be a mapping, not a {type(data).__name__}"], source)
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str],
                    source: str | None = None) -> dict[str, Any]:
    """`a.b.c=value` sets a nested key; values are YAML scalars (`2` is an int)."""
    out = dict(data)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError([f"--config {item!r}: expected KEY=VALUE"], source)
        try:
            parsed = yamlsafe.load(value) if value != "" else ""
        except (yaml.YAMLError, yamlsafe.YamlTooBig):
            parsed = value
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            child = dict(child) if isinstance(child, dict) else {}
            node[part] = child
            node = child
        node[parts[-1]] = parsed
    return out


def _with_defaults(data: dict[str, Any], now: float) -> dict[str, Any]:
    data = dict(data)
    rng = random.Random(int(now))
    if data.get("name") is None:
        words = "-".join(rng.choice(w) for w in (WORDS_A, WORDS_B, WORDS_C))
        data["name"] = f"Experiment ({words})"
    repro = data.get("reproducibility")
    if repro is None or (isinstance(repro, dict) and repro.get("experiment_seed") is None):
        repro = dict(repro or {})
        repro["experiment_seed"] = int(now) % 2**32
        data["reproducibility"] = repro
    storage = data.get("checkpoint_storage")
    if isinstance(storage, dict) and "type" not in storage:
        data["checkpoint_storage"] = {**_default_storage().model_dump(exclude_unset=True),
                                      **storage}
    return data


def _default_storage() -> Any:
    from dettui.config.schema import CheckpointStorage

    return CheckpointStorage(type="shared_fs", host_path="/tmp",
                             storage_path="determined-checkpoint")


# --- error translation -------------------------------------------------------------------


def _real_path(loc: tuple[Any, ...], data: Any) -> list[str]:
    """Keep only the parts of pydantic's location that are keys or indexes of the input."""
    parts: list[str] = []
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if in_dict or in_list:
            parts.append(str(part))
            node = node[part]
        elif isinstance(part, str) and part in _model_fields_at(parts):
            parts.append(part)
            node = None
    return parts


def _model_at(parts: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = ExperimentSchema
    for part in parts:
        if model is None:
            return None
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _model_in(field.annotation)
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _model_fields_at(parts: list[str]) -> set[str]:
    model = _model_at(parts)
    return set(model.model_fields) if model else set()


def _unknown_key(parts: list[str]) -> str:
    key = parts[-1]
    known = sorted(_model_fields_at(parts[:-1]))
    msg = f'unknown key (additionalProperties "{key}" not allowed)'
    close = [k for k in known if k.startswith(key) or key.startswith(k)][:1]
    if not close:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return msg + (f"; did you mean '{close[0]}'?" if close else "")


_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
}


def _message(err: dict[str, Any], parts: list[str]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown_key(parts)
    if kind == "missing":
        return "is required"
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        op, key = bounds[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"])


def _translate(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    by_path: dict[str, list[str]] = {}
    for err in exc.errors():
        parts = _real_path(err["loc"], data)
        path = ".".join(parts) or "config"
        msg = _message(err, parts)
        if msg not in by_path.setdefault(path, []):
            by_path[path].append(msg)
    out = []
    for path, msgs in by_path.items():
        if len(msgs) > 1 and all(m.startswith("must be ") for m in msgs):
            out.append(f"{path}: must be " + " or ".join(m[8:] for m in msgs))
        else:
            out.extend(f"{path}: {m}" for m in msgs)
    return out


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- rules beyond the schema ---------------------------------------------------------------


def _semantic_problems(data: dict[str, Any], managed: bool) -> list[str]:
    out: list[str] = []
    if managed and not data.get("entrypoint"):
        out.append("entrypoint: managed experiments require entrypoint")
    if isinstance(data.get("name"), str) and not data["name"].strip():
        out.append("name: must not be empty")
    searcher = data.get("searcher")
    if isinstance(searcher, dict):
        out += _searcher_problems(searcher)
    storage = data.get("checkpoint_storage")
    if isinstance(storage, dict):
        out += _storage_problems(storage)
    hps = data.get("hyperparameters")
    if isinstance(hps, dict):
        grid = isinstance(searcher, dict) and searcher.get("name") == "grid"
        out += hp.problems(hp.normalize(hps), grid)
    elif hps is not None:
        out.append("hyperparameters: must be a mapping")
    return out


def _searcher_problems(s: dict[str, Any]) -> list[str]:
    name = s.get("name")
    if name in RETIRED:
        return [f"searcher.name: the '{name}' searcher has been removed and is not valid for "
                "new experiments"]
    if name not in SEARCHERS:
        if isinstance(name, str):
            close = difflib.get_close_matches(name, list(SEARCHERS), n=1, cutoff=0.6)
            mean = f"; did you mean '{close[0]}'?" if close else ""
            return [f"searcher.name: unknown searcher '{name}' "
                    f"(valid: {', '.join(SEARCHERS)}){mean}"]
        return []
    out = []
    if name in ("random", "adaptive_asha", "async_halving") and s.get("max_trials") is None:
        out.append(f"searcher.max_trials: is required by the {name} searcher")
    if name == "async_halving" and s.get("num_rungs") is None:
        out.append("searcher.num_rungs: is required by the async_halving searcher")
    if name in ("adaptive_asha", "async_halving") and (
            s.get("max_time") is None or s.get("time_metric") is None):
        out.append(f"searcher: the `{name}` searcher requires `max_time` and `time_metric` "
                   "to be set")
    return out


def _storage_problems(c: dict[str, Any]) -> list[str]:
    kind = c.get("type")
    out = []
    if kind in ("s3", "gcs", "azure"):
        out.append(f"checkpoint_storage.type: '{kind}' storage is valid in Determined, but "
                   "dettui keeps checkpoints on a filesystem its agents share: use shared_fs "
                   "or directory")
    if kind == "shared_fs":
        host = c.get("host_path")
        if not host:
            out.append("checkpoint_storage.host_path: is required for shared_fs storage")
        sp = c.get("storage_path")
        if host and isinstance(sp, str) and not (
                (Path(str(host)) / sp).resolve().is_relative_to(Path(str(host)).resolve())):
            out.append("checkpoint_storage.storage_path: must be under host_path")
    if kind == "directory" and not c.get("container_path"):
        out.append("checkpoint_storage.container_path: is required for directory storage")
    for key in ("host_path", "storage_path", "container_path"):
        value = c.get(key)
        if isinstance(value, str) and any(ord(ch) < 0x20 or ord(ch) == 0x7f for ch in value):
            out.append(f"checkpoint_storage.{key}: {value!r} holds a control character "
                       "(a line break, a tab...), which no storage path may")
    return out


def _warnings(data: dict[str, Any]) -> list[str]:
    out = []
    env = data.get("environment")
    if isinstance(env, dict) and env.get("image"):
        out.append("environment.image is accepted but not used: dettui runs no containers, "
                   "so trials use the agent's Python environment")
    if data.get("bind_mounts"):
        out.append("bind_mounts are accepted but not used: dettui runs no containers, so "
                   "trials see the agent's filesystem directly")
    searcher = data.get("searcher")
    if isinstance(searcher, dict) and "max_length" in searcher and not runs_trial_class(
            data.get("entrypoint")):
        out.append("searcher.max_length is deprecated: report progress with "
                   "core.train.report_progress and exit when done")
    return out


def runs_trial_class(entrypoint: object) -> bool:
    """Whether the entrypoint runs a legacy trial class (`model_def:Trial`, or a launcher's
    `--trial model_def:Trial`): its harness trains to searcher.max_length, as Determined's
    does, so the length is what the experiment needs, not a deprecated habit."""
    if isinstance(entrypoint, str):
        words = entrypoint.split()
    elif isinstance(entrypoint, list):
        words = [str(w) for w in entrypoint]
    else:
        return False
    if len(words) == 1 and LEGACY_TRIAL.match(words[0]):
        return True
    return any(w == "--trial" and LEGACY_TRIAL.match(nxt) for w, nxt in pairwise(words))
