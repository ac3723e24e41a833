"""`dettui trial|t logs|describe|metrics`. Log lines are the trial's text: they reach the
terminal through `output.log_line`, control sequences escaped (dettui.terminal_text)."""

from __future__ import annotations

import json
from typing import Any

from dettui import csv_cells
from dettui.client import Client
from dettui.commands import output
from dettui.errors import InvalidArgument


async def follow_logs(c: Client, trial_id: int, *, follow: bool = True,
                      ranks: list[int] | None = None, tail: int | None = None,
                      as_json: bool = False, prefix: str = "") -> None:
    """Print the trial's log lines (the last `tail`; with `follow`, until its stream ends),
    each after `prefix` (`trial 3 `, when several trials' lines are interleaved)."""
    import sys

    lines = []
    async for item in c.trial_logs(trial_id, follow=follow and not tail, ranks=ranks, tail=tail):
        if tail:
            lines.append(item)
            continue
        _emit(item, as_json, prefix)
        sys.stdout.flush()
    for item in reversed(lines):
        _emit(item, as_json, prefix)
    if tail and follow:
        last = max((int(i["id"]) for i in lines), default=0)
        async for item in c.trial_logs(trial_id, follow=True, ranks=ranks):
            if int(item["id"]) > last:
                _emit(item, as_json, prefix)


def _emit(item: dict[str, object], as_json: bool, prefix: str = "") -> None:
    import json
    import sys

    if as_json:
        sys.stdout.write(json.dumps(item) + "\n")  # JSON escapes every control character
    else:
        output.log_line(prefix + str(item["message"]))


async def logs(c: Client, trial_id: int, *, follow: bool, ranks: list[int] | None,
               tail: int | None, as_json: bool) -> None:
    t = await c.trial(trial_id)
    if ranks:
        ranks = await _ranks(c, t, ranks)
    await follow_logs(c, trial_id, follow=follow, ranks=ranks, tail=tail, as_json=as_json)
    if follow and not as_json:
        output.err_console.print(
            f"Trial log stream ended. To reopen log stream, run: dettui trial logs -f {trial_id}")


async def _ranks(c: Client, trial: dict[str, object], ranks: list[int]) -> list[int] | None:
    """The ranks to ask for. A one-slot trial's lines carry no rank: its rank 0 is all of
    them. A rank the trial does not have is an error, not an empty listing."""
    exp = await c.experiment(int(str(trial["experimentId"])))
    if exp.get("unmanaged"):
        return ranks  # a detached script's ranks are its own: not in any config
    slots = int(((exp.get("config") or {}).get("resources") or {}).get("slots_per_trial", 1))
    slots = max(slots, 1)
    wrong = sorted({r for r in ranks if not 0 <= r < slots})
    if wrong:
        have = "its only rank is 0" if slots == 1 else f"its ranks are 0 to {slots - 1}"
        raise InvalidArgument(f"trial {trial['id']} runs on {slots} slot"
                              f"{'s' if slots != 1 else ''}: {have}; rank "
                              f"{', '.join(map(str, wrong))} has no logs")
    return None if slots <= 1 else ranks


async def describe(c: Client, trial_id: int, *, as_json: bool) -> None:
    t = await c.trial(trial_id)
    if as_json:
        output.print_json(t)
        return
    output.table(f"Trial {trial_id}", ["Experiment", "State", "Steps", "Restarts",
                                       "Hyperparameters", "Latest validation"],
                 [(t["experimentId"], output.state(t["state"]), t["totalBatchesProcessed"],
                   t["restarts"], output.hparams_text(t["hparams"]),
                   output.metrics_text(t.get("latestValidation")))], record=True)
    started = await started_line(c, trial_id)
    if started:
        output.log_line(f"Started: {started}\n")
    resources = t.get("resources")
    if isinstance(resources, dict):
        at = output.when(str(resources.get("sampledAt") or "")) or "at an unknown time"
        output.table(f"Resources of trial {trial_id}, sampled {output.cell(at)}",
                     ["Resource", "Now", "History (oldest to newest)"], resource_rows(resources))


STARTED_WORDS = "dettui: trial started "  # the agent's line (agent/allocation.py)


async def started_line(c: Client, trial_id: int) -> str:
    """How the trial's latest run started, as its agent said in its log: `forked by fork
    server 812 in 3 ms`, or `fresh: <why>` ("" when no agent said)."""
    for item in await c.trial_log_search(trial_id, STARTED_WORDS, limit=1, newest=True):
        text = str(item.get("log") or "")
        if STARTED_WORDS in text:
            return text.split(STARTED_WORDS, 1)[1].strip()
    return ""


BLOCKS = " ▁▂▃▄▅▆▇█"
HISTORY_SHOWN = 60  # samples of a history drawn (the master keeps a minute of them)


def resource_rows(resources: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What a trial uses, as its agents sampled it (the trial's `resources`): CPU % (100 per
    core), resident memory, GPU utilisation and memory (n/a without a GPU), with the
    sparkline of their histories."""
    from dettui.byte_size import human

    history = resources.get("history") if isinstance(resources.get("history"), dict) else {}
    cpu, rss = _numbers(resources.get("cpuPercent")), _numbers(resources.get("rssBytes"))
    util, memory = _numbers(resources.get("gpuUtil")), _numbers(resources.get("gpuMemoryBytes"))
    cpu_history = _numbers(history.get("cpuPercent"))  # type: ignore[union-attr]
    rss_history = _numbers(history.get("rssBytes"))  # type: ignore[union-attr]
    na = "n/a (no GPU)"
    return [
        ("CPU", f"{cpu[0]:.1f} %" if cpu else "?",
         _spark(cpu_history, max(100.0, *cpu_history) if cpu_history else 100.0)),
        ("Memory (RSS)", human(int(rss[0])) if rss else "?",
         _spark(rss_history, max(rss_history, default=0.0))),
        ("GPU utilisation", f"{util[0]:.1f} %" if util else na, ""),
        ("GPU memory", human(int(memory[0])) if memory else na, ""),
    ]


def _numbers(value: Any) -> list[float]:
    """A number, or a list of them, as a list of finite non-negative floats (others dropped:
    the master bounds them, this is what a stand-in or an older one may send)."""
    values = value[-HISTORY_SHOWN:] if isinstance(value, list) else [value]
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and 0 <= v < float("inf")]


def _spark(values: list[float], top: float) -> str:
    if not values or top <= 0:
        return ""
    last = len(BLOCKS) - 1
    return "".join(BLOCKS[max(1, min(last, round(v / top * last)))] for v in values)


METRIC_FORMATS = ("table", "csv", "json")
NAME_CAP = 40  # characters of a metric's name in a table's heading
VALUE_WIDTH = 12  # a float's `.6g` at its widest (-1.23457e-05)


async def metrics(c: Client, trial_id: int, *, group: str = "training",
                  fmt: str = "table") -> None:
    """`dettui trial metrics ID`: the trial's `group` reports by steps, as a table, CSV
    (`steps,time,<metric...>`) or JSON lines, written a page at a time as they are read (a
    history of a million reports is never held). The columns are the metrics of the first
    page; a metric first reported later is named on stderr (JSON lines carry every one)."""
    import sys

    from dettui import terminal_text

    writer = MetricWriter(fmt, sys.stdout)
    try:
        async for page in c.metric_pages(trial_id, group):
            writer.page(page)
            sys.stdout.flush()
        writer.end()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader is gone (`| head`): nothing more to say
        terminal_text.silence(sys.stdout)
        return
    if writer.rows == 0:
        output.err_console.print(f"Trial {trial_id} has no {group} metrics.", markup=False)
    elif writer.left_out:
        names = ", ".join(output.cell(n) for n in list(writer.left_out)[:10])
        more = len(writer.left_out) - 10
        output.err_console.print(
            f"Metrics first reported after the first {writer.first_rows} reports are not in "
            f"the {fmt}: {names}{f' and {more} more' if more > 0 else ''} (--json has them)",
            markup=False)


class MetricWriter:
    """Reports written as they come: the columns fixed by the first page."""

    def __init__(self, fmt: str, out: Any) -> None:
        if fmt not in METRIC_FORMATS:
            raise InvalidArgument(f"format: expected one of {', '.join(METRIC_FORMATS)}")
        self.fmt, self.out = fmt, out
        self.names: list[str] = []
        self._known: set[str] = set()
        self.left_out: dict[str, None] = {}  # metrics not in the columns, in order seen
        self.rows = self.first_rows = 0
        self.widths: list[int] = []
        self.csv: Any = None

    def page(self, reports: list[dict[str, Any]]) -> None:
        if not self.rows:
            self._start(reports)
        for r in reports:
            avg = (r.get("metrics") or {}).get("avgMetrics") or {}
            if self.fmt == "json":
                self.out.write(json.dumps({"steps": r.get("stepsCompleted"),
                                           "time": r.get("reportTime"), "group": r.get("group"),
                                           "metrics": avg}) + "\n")
            else:
                for name in avg:
                    if name not in self._known:
                        self.left_out[name] = None
                values = [avg.get(n) for n in self.names]
                self._row(r.get("stepsCompleted"), r.get("reportTime"), values)
        self.rows += len(reports)

    def end(self) -> None:
        """Nothing to close: every row is out when its page is."""

    def _start(self, reports: list[dict[str, Any]]) -> None:
        import csv

        seen: dict[str, None] = {}
        for r in reports:
            seen.update(dict.fromkeys((r.get("metrics") or {}).get("avgMetrics") or {}))
        self.names = list(seen)
        self._known = set(seen)
        self.first_rows = len(reports)
        if self.fmt == "csv":
            self.csv = csv.writer(self.out, lineterminator="\n")
            self.csv.writerow(csv_cells.row(["steps", "time", *map(output.cell, self.names)]))
        elif self.fmt == "table":
            steps = max(len(str(r.get("stepsCompleted", ""))) for r in reports)
            heads = ["Steps", "Time", *(output.cell(n)[:NAME_CAP] for n in self.names)]
            self.widths = [max(5, steps + 2), 19,
                           *(max(len(h), VALUE_WIDTH) for h in heads[2:])]
            self._line(heads)
            self.out.write("  ".join("─" * w for w in self.widths) + "\n")

    def _row(self, steps: Any, time: Any, values: list[Any]) -> None:
        if self.fmt == "csv":
            # (a string's control characters would reach a terminal: shown as output.cell does)
            self.csv.writerow(csv_cells.row([steps, time, *(
                "" if v is None else v if isinstance(v, int | float)
                else output.cell(v if isinstance(v, str) else json.dumps(v)) for v in values)]))
        else:
            self._line([str(steps), output.when(time),
                        *(output.cell(_value(v)) for v in values)], right=True)

    def _line(self, cells: list[str], right: bool = False) -> None:
        parts = []
        for i, (text, width) in enumerate(zip(cells, self.widths, strict=True)):
            if len(text) > width:
                text = text[:width - 1] + "…"
            parts.append(text.rjust(width) if right and i != 1 else text.ljust(width))
        self.out.write("  ".join(parts).rstrip() + "\n")


def _value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int | str):
        return str(v)
    return json.dumps(v)
