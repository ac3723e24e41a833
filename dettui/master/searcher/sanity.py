"""Search sanity: what a validation lacks for its searcher, in words the user reads.

A validation without the searcher's metric (`searcher.metric`), or, for adaptive searches,
without the time metric (`searcher.time_metric`), ranks nothing. Determined's adaptive searcher
errors the experiment on such a report; the other searchers say nothing, and their experiment
ends COMPLETED with no best. dettui says so: a line in the trial's logs (once per trial), a
warning on the experiment (`warnings` in its JSON), and, once it COMPLETED with no validation
at all, that nothing ranked its trials. Pure: texts from configs and metrics, no I/O.

An experiment keeps one warning per kind (`KINDS`: the searcher metric missing, the time metric
missing, the adaptive search unable to rank, a trial that failed): a later one of the same kind
replaces it, counting how many there were, so that a trial varying its metric names cannot
crowd the others out.
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
LACK_METRIC = "validation metrics lack searcher.metric"
LACK_TIME = "validation metrics lack searcher.time_metric"
CANNOT_RANK = "the adaptive search cannot rank trials"
FAILED = "trials failed"  # "trial 3 exited with code 2 (...)", "2 trials failed; the latest: ..."
KINDS = (LACK_METRIC, LACK_TIME, CANNOT_RANK)


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


def lacking(config: SearcherConfig, metrics: Mapping[str, Any], what: str,
            before: list[str] | None = None) -> str:
    """The experiment's warning for validations that lack `what` (one item of `missing`),
    counting those of `before` (the experiment's warnings so far), naming the latest's
    metrics."""
    names = sorted(str(k) for k in metrics)
    shown = ", ".join(_short(n) for n in names[:MAX_NAMES])
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    consequence = ("the adaptive search cannot rank its trials"
                   if config.name in ADAPTIVE else "no trial is ranked and no checkpoint is best")
    head = f"validation metrics lack {what}"
    count = _counted(before or [], head) + 1
    times = "" if count == 1 else f"{count} validations, the latest "
    return f"{head} ({times}reported: {shown or 'nothing'}{more}): {consequence}"


def _counted(warnings: list[str], head: str) -> int:
    """The validations a stored warning starting with `head` counted (1 if it says none)."""
    for w in warnings:
        if w.startswith(head + " ("):
            number = w[len(head) + 2:].partition(" ")[0]
            return int(number) if number.isdigit() and len(number) < 10 else 1
    return 0


def trial_line(trial_id: int, steps: int, warning: str) -> str:
    """The trial's log line for its first validation that lacks what the searcher reads."""
    return f"trial {trial_id}, validation at step {steps}: {warning}\n"


def never_reported(name: str | None) -> str:
    """A COMPLETED experiment's reason when none of its validations was ranked by its
    searcher metric `name`."""
    return (f"no validation reported searcher.metric '{_short(name or '')}': no trial was "
            "ranked and no checkpoint is best")


def cannot_rank(error: str) -> str:
    """Why an adaptive search stopped the experiment (Determined: 'encountered error ...')."""
    return f"{CANNOT_RANK} and stopped the experiment: {_cut(error, MAX_ERROR)}"


def trial_failed(trial_id: int, exit_code: int | None, reason: str, last_line: str,
                 restarts: int, before: list[str] | None = None) -> str:
    """The experiment's warning for a trial that ended in ERROR: how it exited and its last
    line, e.g. "trial 3 exited with code 2 (sh: cd: can't cd to sub) after 1 restart"; with
    the failed trials `before` counted ("2 trials failed; the latest: ...")."""
    if exit_code not in (None, 0):
        how = f"exited with code {exit_code}"
    elif reason and reason not in ("error", "exit"):
        how = f"ended: {_cut(_printable(reason), MAX_NAME)}"
    else:
        how = "failed"
    said = _cut(_printable(last_line.strip()), MAX_ERROR)
    again = f" after {restarts} restart{'' if restarts == 1 else 's'}" if restarts else ""
    text = f"trial {trial_id} {how}{f' ({said})' if said else ''}{again}"
    count = _failed_count(before or []) + 1
    return text if count == 1 else f"{count} {FAILED}; the latest: {text}"


def _failed_count(warnings: list[str]) -> int:
    for w in warnings:
        if _kind(w) == FAILED:
            first = w.split(" ", 1)[0]
            return int(first) if w[len(first):].startswith(f" {FAILED}") and first.isdigit() \
                else 1
    return 0


def added(warnings: list[str], text: str) -> list[str] | None:
    """`warnings` with `text` added, replacing the one of its kind (in place), or None when it
    has it already, or is full."""
    if text in warnings:
        return None
    kind = _kind(text)
    for i, w in enumerate(warnings):
        if _kind(w) == kind:
            return [*warnings[:i], text, *warnings[i + 1:]]
    if len(warnings) >= MAX_WARNINGS:
        return None
    return [*warnings, text]


def _kind(text: str) -> str:
    """The kind of a warning (one of `KINDS`), or the text itself."""
    if text.startswith("trial ") or text.split(" ", 1)[-1].startswith(FAILED):
        return FAILED
    return next((k for k in KINDS if text.startswith(k)), text)


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _short(name: str) -> str:
    return _cut(_printable(name), MAX_NAME)


def shown(stored: list[str], state: ExperimentState, best: float | None, num_trials: int,
          unmanaged: bool, name: str | None) -> list[str]:
    """The warnings an experiment shows: those its reports and trials left, and, once it
    COMPLETED with trials and no best, that no validation had its searcher metric (unless a
    warning says already what its validations lacked). An experiment that ended otherwise
    (its trials failed, or it was canceled) says nothing of validations it never got."""
    out = list(stored)
    if (state is ExperimentState.COMPLETED and best is None and num_trials and not unmanaged
            and not any(_kind(w) == LACK_METRIC for w in stored)):
        out.append(never_reported(name))
    return out
