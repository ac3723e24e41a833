"""Search sanity: what a validation lacks for its searcher, in words the user reads.

A validation without the searcher's metric (`searcher.metric`), or, for adaptive searches,
without the time metric (`searcher.time_metric`), ranks nothing. Determined's adaptive searcher
errors the experiment on such a report; the other searchers say nothing, and their experiment
ends COMPLETED with no best. dettui says so: a line in the trial's logs (once per trial), a
warning on the experiment (`warnings` in its JSON), and, once it ended, that nothing ranked
its trials. Pure: texts from configs and metrics, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dettui import metric
from dettui.config.schema import Length
from dettui.config.schema import Searcher as SearcherConfig
from dettui.models import ExperimentState

MAX_WARNINGS = 10  # an experiment keeps at most this many (distinct) warnings
MAX_NAMES = 8  # reported metric names a warning quotes
MAX_NAME = 60  # characters of each quoted name
MAX_ERROR = 300  # characters of the searcher's complaint a warning quotes
ADAPTIVE = ("adaptive_asha", "async_halving")


def time_metric(config: SearcherConfig) -> str | None:
    """The metric that counts an adaptive search's time (`time_metric`, or a legacy
    `max_length` unit); None for other searchers."""
    if config.name not in ADAPTIVE:
        return None
    if config.time_metric:
        return config.time_metric
    if isinstance(config.max_length, Length):
        ((unit, _),) = config.max_length.as_dict().items()
        return str(unit)
    return None


def missing(config: SearcherConfig, metrics: Mapping[str, Any]) -> list[str]:
    """What a validation's `metrics` lack that the searcher reads, each as
    "searcher.metric 'x'" (missing, or not a number)."""
    out = []
    if metric.number(metrics, config.metric) is None:
        out.append(f"searcher.metric '{_short(config.metric)}'")
    unit = time_metric(config)
    if unit is not None and metric.number(metrics, unit) is None:
        out.append(f"searcher.time_metric '{_short(unit)}'")
    return out


def lacking(config: SearcherConfig, metrics: Mapping[str, Any], what: list[str]) -> str:
    """The experiment's warning for validations that lack `what` (from `missing`)."""
    names = sorted(str(k) for k in metrics)
    shown = ", ".join(_short(n) for n in names[:MAX_NAMES])
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    consequence = ("the adaptive search cannot rank its trials"
                   if config.name in ADAPTIVE else "no trial is ranked and no checkpoint is best")
    return (f"validation metrics lack {' and '.join(what)} (reported: {shown or 'nothing'}"
            f"{more}): {consequence}")


def trial_line(trial_id: int, steps: int, warning: str) -> str:
    """The trial's log line for its first validation that lacks what the searcher reads."""
    return f"trial {trial_id}, validation at step {steps}: {warning}\n"


def never_reported(name: str | None) -> str:
    """An ended experiment's reason when no validation ever had its searcher metric `name`."""
    return (f"no validation reported searcher.metric '{_short(name or '')}': no trial was "
            "ranked and no checkpoint is best")


def cannot_rank(error: str) -> str:
    """Why an adaptive search stopped the experiment (Determined: 'encountered error ...')."""
    if len(error) > MAX_ERROR:
        error = error[:MAX_ERROR - 1] + "…"
    return f"the adaptive search cannot rank trials and stopped the experiment: {error}"


def added(warnings: list[str], text: str) -> list[str] | None:
    """`warnings` with `text` added, or None when it has it already or is full."""
    if text in warnings or len(warnings) >= MAX_WARNINGS:
        return None
    return [*warnings, text]


def _short(name: str) -> str:
    name = "".join(c if c.isprintable() else "?" for c in name)
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 1] + "…"


def shown(stored: list[str], state: ExperimentState, best: float | None, num_trials: int,
          unmanaged: bool, name: str | None) -> list[str]:
    """The warnings an experiment shows: those its reports left, and, once it ended with
    trials and no best, that no validation had its searcher metric."""
    out = list(stored)
    if state.is_terminal() and best is None and num_trials and not unmanaged:
        out.append(never_reported(name))
    return out
