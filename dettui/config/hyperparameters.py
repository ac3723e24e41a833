"""Hyperparameters: Determined's types, nested groups, validation and sampling."""

from __future__ import annotations

import math
import random
from typing import Any

TYPES = ("const", "int", "double", "log", "categorical")
MAX_GRID = 100_000  # trials a grid search may have
MAX_GRID_CELLS = 10_000_000  # points x hyperparameters: the values a grid search hands out


def normalize(raw: Any) -> dict[str, Any]:
    """Every leaf as `{type: ..., ...}`; bare scalars and lists become const; dicts without
    `type` are nested groups."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if isinstance(value, dict) and "type" not in value:
            out[str(name)] = normalize(value)
        elif isinstance(value, dict):
            out[str(name)] = dict(value)
        else:
            out[str(name)] = {"type": "const", "val": value}
    return out


def is_leaf(spec: Any) -> bool:
    return isinstance(spec, dict) and "type" in spec


def problems(hps: dict[str, Any], grid: bool, prefix: str = "hyperparameters") -> list[str]:
    found = _problems(hps, grid, prefix)
    if grid and not found and prefix == "hyperparameters":
        found += _grid_size_problems(hps)
    return found


def _grid_size_problems(hps: dict[str, Any]) -> list[str]:
    size = grid_size(hps)
    if size > MAX_GRID:
        return [f"hyperparameters: the grid has {_count(hps)} points, over the limit of "
                f"{MAX_GRID:,} trials; lower some counts"]
    leaves = len(_flatten(hps))
    if size * leaves > MAX_GRID_CELLS:
        return [f"hyperparameters: the grid has {size:,} points of {leaves:,} hyperparameters "
                f"each ({size * leaves:,} values), over the limit of {MAX_GRID_CELLS:,}; "
                "lower some counts or use fewer hyperparameters"]
    return []


def _count(hps: dict[str, Any]) -> str:
    """The grid's size for a message: exact below 10^15, else its power of ten from a sum of
    logarithms (a product of hostile counts would be an integer too long to print)."""
    sizes = [_axis_size(spec) for _, spec in _flatten(hps)]
    size = 1
    for n in sizes:
        size *= n
        if size >= 10**15:
            return f"about 10^{int(sum(math.log10(n) for n in sizes))}"
    return f"{size:,}"


def _axis_size(spec: dict[str, Any]) -> int:
    kind = spec["type"]
    if kind == "categorical":
        return len(spec["vals"])
    if kind == "int":
        return min(int(spec["count"]), int(spec["maxval"]) - int(spec["minval"]) + 1)
    return 1 if kind == "const" else int(spec["count"])


def grid_size(hps: dict[str, Any]) -> int:
    """How many points `grid(hps)` has, computed without building any of them. Past MAX_GRID
    it stops multiplying and answers some number over MAX_GRID (every axis has at least one
    value), so a hostile config's product never grows into a huge integer."""
    size = 1
    for _, spec in _flatten(hps):
        size *= _axis_size(spec)
        if size > MAX_GRID:
            return size
    return size


def _problems(hps: dict[str, Any], grid: bool, prefix: str) -> list[str]:
    found: list[str] = []
    for name, spec in hps.items():
        path = f"{prefix}.{name}"
        if not is_leaf(spec):
            found += _problems(spec, grid, path)
            continue
        found += _leaf_problems(spec, grid, path)
    return found


_KEYS = {"const": {"val"}, "int": {"minval", "maxval", "count"},
         "double": {"minval", "maxval", "count"}, "log": {"minval", "maxval", "base", "count"},
         "categorical": {"vals"}}


def _leaf_problems(spec: dict[str, Any], grid: bool, path: str) -> list[str]:
    kind = spec.get("type")
    if kind not in TYPES:
        return [f"{path}.type: unknown hyperparameter type {kind!r} "
                "(expected const, int, double, log or categorical)"]
    out = [f"{path}.{k}: unknown key for a {kind} hyperparameter"
           for k in spec if k != "type" and k not in _KEYS[kind]]
    if kind == "const":
        if "val" not in spec:
            out.append(f"{path}.val: is required")
        return out
    if kind == "categorical":
        vals = spec.get("vals")
        if not isinstance(vals, list) or not vals:
            out.append(f"{path}.vals: must be a non-empty list")
        return out
    out += _range_problems(spec, kind, path)
    if grid and spec.get("count") is None:
        out.append(f"{path}: grid search is in use but count was not provided")
    return out


def _range_problems(spec: dict[str, Any], kind: str, path: str) -> list[str]:
    out = []
    number = int if kind == "int" else (int, float)
    lo, hi = spec.get("minval"), spec.get("maxval")
    for key, value in (("minval", lo), ("maxval", hi)):
        if value is None:
            out.append(f"{path}.{key}: is required")
        elif isinstance(value, bool) or not isinstance(value, number):
            out.append(f"{path}.{key}: must be {'an integer' if kind == 'int' else 'a number'}")
    if not out and lo >= hi:  # type: ignore[operator]
        out.append(f"{path}: minval ({lo}) must be less than maxval ({hi})")
    count = spec.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)
                              or count < 1):
        out.append(f"{path}.count: must be an integer >= 1")
    if kind == "log":
        base = spec.get("base", 10)
        if isinstance(base, bool) or not isinstance(base, int | float) or base <= 0:
            out.append(f"{path}.base: must be a number > 0")
    return out


def sample(hps: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One random draw (Determined's sampleAll): int uniform inclusive, double uniform,
    log base**U(min, max), categorical uniform; nested groups give nested dicts."""
    out: dict[str, Any] = {}
    for name, spec in hps.items():
        if not is_leaf(spec):
            out[name] = sample(spec, rng)
            continue
        kind = spec["type"]
        if kind == "const":
            out[name] = spec["val"]
        elif kind == "int":
            out[name] = rng.randint(int(spec["minval"]), int(spec["maxval"]))
        elif kind == "double":
            out[name] = rng.uniform(float(spec["minval"]), float(spec["maxval"]))
        elif kind == "log":
            out[name] = math.pow(float(spec.get("base", 10)),
                                 rng.uniform(float(spec["minval"]), float(spec["maxval"])))
        else:
            out[name] = rng.choice(spec["vals"])
    return out


def sample_single(hps: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The `single` searcher's hyperparameters: one draw from the experiment seed."""
    return sample(hps, random.Random(seed))


def _round_half_away(x: float) -> int:
    """Go's math.Round: halves away from zero (Python's round() goes to even)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def grid_axis(spec: dict[str, Any]) -> list[Any]:
    """The grid values of one hyperparameter (Determined's `grid()`): `count` evenly spaced
    values including both ends, the midpoint when count is 1; ints clamp count to the range."""
    kind = spec["type"]
    if kind == "const":
        return [spec["val"]]
    if kind == "categorical":
        return list(spec["vals"])
    lo, hi, count = spec["minval"], spec["maxval"], int(spec["count"])
    if kind == "int":
        count = min(count, int(hi) - int(lo) + 1)
        if count == 1:
            return [_round_half_away((lo + hi) / 2)]
        return [_round_half_away(lo + i * (hi - lo) / (count - 1)) for i in range(count)]
    points = ([(lo + hi) / 2] if count == 1 else
              [lo + i * (hi - lo) / (count - 1) for i in range(count)])
    if kind == "log":
        base = float(spec.get("base", 10))
        return [math.pow(base, p) for p in points]
    return [float(p) for p in points]


def _flatten(hps: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                              dict[str, Any]]]:
    out = []
    for name in sorted(hps):
        spec = hps[name]
        if is_leaf(spec):
            out.append(((*prefix, name), spec))
        else:
            out += _flatten(spec, (*prefix, name))
    return out


class Grid:
    """The points of a grid search (a validated one: at most MAX_GRID points), each built on
    demand from its index, so a search holds its axes and not every point."""

    def __init__(self, hps: dict[str, Any]) -> None:
        self.axes = [(path, grid_axis(spec)) for path, spec in _flatten(hps)]
        self.size = math.prod(len(values) for _, values in self.axes)

    def __len__(self) -> int:
        return self.size

    def point(self, index: int) -> dict[str, Any]:
        """Point `index` of the cartesian product, names in sorted order, the first name
        outermost (itertools.product's order); nested groups give nested dicts."""
        if not 0 <= index < self.size:
            raise IndexError(index)
        picks: list[Any] = []
        for _, values in reversed(self.axes):
            index, at = divmod(index, len(values))
            picks.append(values[at])
        point: dict[str, Any] = {}
        for (path, _), value in zip(self.axes, reversed(picks), strict=True):
            node = point
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
        return point


def grid(hps: dict[str, Any]) -> list[dict[str, Any]]:
    """Every point of the grid, in order (small grids; a search uses `Grid`)."""
    points = Grid(hps)
    return [points.point(i) for i in range(len(points))]
