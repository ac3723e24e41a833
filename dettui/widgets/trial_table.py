"""The experiment screen's trials table as data: its columns, made from the trials as they
arrive (one per hyperparameter, flattened as `optimizer.lr`; the searcher metric's best and
latest; each other validation metric's latest; CPU, RSS and GPU once a trial reports them),
and each trial's row. Pure: no widgets, no I/O."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dettui import byte_size
from dettui.widgets.columns import Column
from dettui.widgets.safe import clean
from dettui.widgets.shown import Shown, number, short
from dettui.widgets.trial_colours import colour

STOPPED = "⇣"  # after the state of a trial the searcher stopped early (ASHA)
SELECTED = "●"  # the selection marker, in the trial's compare colour
MAX_HPARAMS = 64  # hyperparameter columns at most (the rest are counted, not shown)
MAX_METRICS = 16  # other validation metrics' columns at most
MAX_TEXT = 60  # a hyperparameter that is no number is cut to this many characters
SPARK_CELLS = 8  # CPU history samples drawn in the CPU cell
BLOCKS = " ▁▂▃▄▅▆▇█"

# priority: the narrower the screen, the sooner the higher numbers go (hyperparameters from
# the right, after the resources, the latest value, restarts and the other metrics)
HPARAM, CPU, LATEST, RSS, RESTARTS, METRIC = 1, 2, 3, 4, 5, 6


def flatten(hparams: Any, prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters as dotted names (`{"optimizer": {"lr": 1}}` ->
    `{"optimizer.lr": 1}`); lists as their JSON text."""
    if not isinstance(hparams, dict):
        return {prefix: hparams} if prefix else {}
    out: dict[str, Any] = {}
    for name, value in hparams.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def hparam_cell(value: Any) -> Any:
    """A hyperparameter's cell: a number as it sorts (floats to 5 digits), else its text."""
    if isinstance(value, bool) or value is None:
        return None if value is None else str(value).lower()
    if isinstance(value, int | float):
        return short(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def spark(values: Iterable[Any]) -> str:
    """CPU percentages, one cell each, on a 0-100 scale (more, for processes using several
    cores, raise the scale to their peak)."""
    numbers = [number(v) for v in values][-SPARK_CELLS:]
    top = max([100.0, *(v for v in numbers if v is not None)])
    return "".join(" " if v is None else BLOCKS[max(1, round(max(v, 0.0) / top * 8))]
                   for v in numbers)


def _metrics(block: Any) -> dict[str, Any]:
    """A workload's (bestValidation, latestValidation) average metrics."""
    metrics = block.get("metrics") if isinstance(block, dict) else None
    avg = metrics.get("avgMetrics") if isinstance(metrics, dict) else None
    return avg if isinstance(avg, dict) else {}


@dataclass
class TrialTable:
    """What the trials seen so far need as columns, and their rows. `metric` is the
    searcher's: its best (`best`) and latest value (`m.<metric>`, as every metric's latest
    value, so a filter names it: `validation_loss<0.3`)."""

    metric: str = ""
    hparams: dict[str, bool] = field(default_factory=dict)  # name -> every value a number
    metrics: list[str] = field(default_factory=list)
    resources: set[str] = field(default_factory=set)  # of "cpu", "rss", "gpu"
    more_hparams: int = 0  # hyperparameters past MAX_HPARAMS, not shown

    def see(self, trials: Iterable[dict[str, Any]]) -> bool:
        """Take in the trials' names; True when the columns changed."""
        before = (dict(self.hparams), list(self.metrics), set(self.resources))
        extra: set[str] = set()
        for t in trials:
            for name, value in flatten(t.get("hparams") or {}).items():
                numeric = value is None or number(value) is not None
                if name in self.hparams:
                    self.hparams[name] = self.hparams[name] and numeric
                elif len(self.hparams) < MAX_HPARAMS:
                    self.hparams[name] = numeric
                else:
                    extra.add(name)
            for name in _metrics(t.get("latestValidation")):
                if (name != self.metric and name not in self.metrics
                        and len(self.metrics) < MAX_METRICS):
                    self.metrics.append(name)
            self.resources |= _resource_kinds(t.get("resources"))
        self.more_hparams = max(self.more_hparams, len(extra))
        return before != (self.hparams, self.metrics, self.resources)

    def columns(self) -> list[Column]:
        cols = [Column("id", "Trial", width=5, align="right"),
                Column("sel", "", width=1),
                Column("state", "State", width=12),
                Column("steps", "Steps", width=7, align="right"),
                Column("best", "Best", width=9, align="right"),
                Column(f"m.{self.metric}", "Latest", width=9, align="right",
                       priority=LATEST)]
        cols += [Column(f"h.{name}", clean(name), align="right" if numeric else "left",
                        priority=HPARAM) for name, numeric in self.hparams.items()]
        cols += [Column(f"m.{name}", clean(name), align="right", priority=METRIC)
                 for name in self.metrics]
        cols.append(Column("restarts", "Restarts", width=8, align="right", priority=RESTARTS))
        if "cpu" in self.resources:
            cols.append(Column("cpu", "CPU", width=SPARK_CELLS + 6, priority=CPU))
        if "rss" in self.resources:
            cols.append(Column("rss", "RSS", width=10, align="right", priority=RSS))
        if "gpu" in self.resources:
            cols.append(Column("gpu", "GPU", width=15, align="right", priority=RSS))
        return cols

    def row(self, t: dict[str, Any], selected: int | None = None) -> dict[str, Any]:
        """The trial's cells; `selected`: its place in the compare selection, if any."""
        state = str(t.get("state") or "").removeprefix("STATE_")
        latest = _metrics(t.get("latestValidation"))
        row: dict[str, Any] = {
            "sel": (SELECTED, f"bold {colour(selected)}") if selected is not None else None,
            "id": int(t["id"]),
            "state": f"{state} {STOPPED}" if t.get("stoppedBySearcher") else state,
            "steps": t.get("totalBatchesProcessed", 0), "restarts": t.get("restarts", 0),
            "best": short(number(_metrics(t.get("bestValidation")).get(self.metric))),
            f"m.{self.metric}": short(number(latest.get(self.metric))),
        }
        for name, value in flatten(t.get("hparams") or {}).items():
            row[f"h.{name}"] = hparam_cell(value)
        for name in self.metrics:
            row[f"m.{name}"] = short(number(latest.get(name)))
        row.update(resource_cells(t.get("resources")))
        return row


def _resource_kinds(res: Any) -> set[str]:
    if not isinstance(res, dict):
        return set()
    kinds = {"cpu"} if number(res.get("cpuPercent")) is not None else set()
    if number(res.get("rssBytes")) is not None:
        kinds.add("rss")
    if number(res.get("gpuUtil")) is not None or number(res.get("gpuMemoryBytes")) is not None:
        kinds.add("gpu")
    return kinds


def resource_cells(res: Any) -> dict[str, Any]:
    """A running trial's CPU (history sparkline and latest %), RSS and GPU cells."""
    if not isinstance(res, dict):
        return {}
    cells: dict[str, Any] = {}
    cpu = number(res.get("cpuPercent"))
    if cpu is not None:
        history = res.get("history")
        samples = history.get("cpuPercent") if isinstance(history, dict) else None
        line = spark(samples if isinstance(samples, list) else [])
        cells["cpu"] = Shown(cpu, f"{line} {cpu:.0f}%".lstrip())
    rss = number(res.get("rssBytes"))
    if rss is not None:
        cells["rss"] = Shown(rss, byte_size.human(int(rss)))
    util, memory = number(res.get("gpuUtil")), number(res.get("gpuMemoryBytes"))
    if util is not None or memory is not None:
        text = " ".join(p for p in (f"{util:.0f}%" if util is not None else "",
                                    byte_size.human(int(memory)) if memory is not None else "")
                        if p)
        cells["gpu"] = Shown(util if util is not None else 0.0, text)
    return cells


def ranked(trials: Iterable[dict[str, Any]], metric: str, smaller_is_better: bool) -> list[str]:
    """Keys of the trials that have a best validation `metric`, best first (ties: lower id)."""
    scored = []
    for t in trials:
        value = number(_metrics(t.get("bestValidation")).get(metric))
        if value is not None:
            scored.append((value if smaller_is_better else -value, int(t["id"])))
    return [str(i) for _, i in sorted(scored)]
