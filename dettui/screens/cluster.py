"""The cluster: agents and pools, slots and their allocations, and each machine's telemetry —
per GPU utilisation, memory, temperature and power with history sparklines (NVML), or CPU and
memory per agent (psutil) with a clear note when there is no NVIDIA GPU — and under each agent
its running trials: CPU % and RSS with sparklines, GPU utilisation and memory with NVML."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Header

from dettui.screens.base import ApiScreen, Row
from dettui.widgets.keybar import KeyBar
from dettui.widgets.rowtable import Column, RowTable
from dettui.widgets.safe import Plain, plain

COLUMNS = [  # priority: the narrower the screen, the sooner the higher numbers go
    Column("id", "Agent", width=16),
    Column("host", "Host", width=16, priority=5),
    Column("pool", "Pool", width=10, priority=3),
    Column("slots", "Slots", width=5, align="right"),
    Column("used", "In use", width=6, align="right"),
    Column("type", "Type", width=5, priority=4),
    Column("cpu", "CPU %", width=5, align="right", priority=2),
    Column("mem", "Memory", width=14, align="right", priority=2),
    Column("enabled", "Enabled", width=13, priority=1),
    Column("allocations", "Allocations", priority=1),
]
GIB = 1024**3
AGENT_ROWS = 12  # lines of the agents table at most


def _gib(used: Any, total: Any) -> str:
    if not isinstance(used, int | float) or not isinstance(total, int | float) or not total:
        return ""
    return f"{used / GIB:.1f}/{total / GIB:.1f} GiB"


def _num(value: Any) -> str:
    return f"{value:.0f}" if isinstance(value, int | float) else "?"


BLOCKS = " ▁▂▃▄▅▆▇█"


def spark(values: list[Any], top: float = 100.0) -> str:
    """A history of percentages on a fixed 0-100 scale, one cell per sample (a relative
    scale would draw an idle 2% machine as full); a missing sample is a blank cell."""
    cells = []
    for v in values:
        if not isinstance(v, int | float):
            cells.append(" ")
            continue
        level = round(max(0.0, min(float(v), top)) / top * (len(BLOCKS) - 1))
        cells.append(BLOCKS[max(level, 1)])  # a floor so the line is visible at 0%
    return "".join(cells) or "(no samples yet)"


HISTORY_CAP = 1000  # samples drawn at most, whatever the width


class SparkLine(Plain):
    """A labelled history that fits its width: the newest samples that fit between the label
    and what follows it are drawn (at 80 columns two minutes of an agent's samples would wrap
    onto a second line); re-drawn when the width changes."""

    DEFAULT_CSS = "SparkLine { height: 1; }"

    def __init__(self, values: list[Any], top: float = 100.0, *, label: str = "",
                 after: str = "", **kw: Any) -> None:
        self.values, self.top, self.label, self.after = values, top, label, after
        super().__init__(self._line(HISTORY_CAP), **kw)

    def _line(self, width: int) -> Text:
        text = Text(self.label, end="", no_wrap=True, overflow="crop")
        if not self.values:
            return text.append("(no samples yet)")
        room = max(1, width - len(self.label) - len(self.after))
        text.append(spark(self.values[-room:], self.top), style="green")
        return text.append(self.after)

    def render(self) -> Text:
        width = self.content_size.width
        return self._line(width if width > 0 else HISTORY_CAP)


def _spark(values: list[Any]) -> SparkLine:
    return SparkLine(values[-HISTORY_CAP:], classes="spark")


def _bytes(value: Any) -> str:
    if not isinstance(value, int | float):
        return "?"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 2**20:.0f} MiB"


HISTORY_SHOWN = 60  # samples of a trial's history drawn (the master keeps a minute)


def _history(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    return [float(v) for v in values[-HISTORY_SHOWN:] if isinstance(v, int | float)]


def _trial_spark(label: str, values: list[float], top: float, peak: str) -> SparkLine:
    """A labelled sparkline scaled to its peak (a trial's CPU to at least one core), so a
    trial's own changes show; the peak is said after it."""
    return SparkLine(values, top, label=f"{label:<4}", after=f" max {peak}" if values else "",
                     classes="metric")


SAMPLING = "sampling…"  # a running trial whose agent has sent no sample of it yet


def trial_widgets(trials: list[dict[str, Any]]) -> list[Plain]:
    """An agent's running trials (`running_trials`): a line of the latest readings, then CPU %
    and RSS sparklines; GPU utilisation and memory where NVML gave them; a trial not sampled
    yet in one line that says so."""
    widgets: list[Plain] = []
    for t in trials:
        if t.get(UNSAMPLED):
            what = (f"Trial {t['trialId']} · experiment {t.get('experimentId')}"
                    if t.get("trialId") is not None else f"allocation {t.get('containerId')}")
            widgets.append(Plain(plain(f"{what} · {SAMPLING}"), classes="metric"))
            continue
        line = (f"Trial {t.get('trialId')} · experiment {t.get('experimentId')} · "
                f"CPU {_num(t.get('cpuPercent'))}% · RSS {_bytes(t.get('rssBytes'))}")
        if t.get("gpuUtil") is not None or t.get("gpuMemoryBytes") is not None:
            line += f" · GPU {_num(t.get('gpuUtil'))}%, {_bytes(t.get('gpuMemoryBytes'))}"
        widgets.append(Plain(plain(line), classes="metric"))
        history = t.get("history") if isinstance(t.get("history"), dict) else {}
        cpu = _history(history.get("cpuPercent"))
        rss = _history(history.get("rssBytes"))
        widgets.append(_trial_spark("CPU", cpu, max([100.0, *cpu]),
                                    f"{max(cpu, default=0):.0f}%"))
        widgets.append(_trial_spark("RSS", rss, max([1.0, *rss]),
                                    _bytes(max(rss, default=0))))
    return widgets


def trial_texts(trials: list[dict[str, Any]]) -> list[Text]:
    """`trial_widgets` as text (each sparkline as it is drawn with room for a minute)."""
    return [w.render() if isinstance(w, SparkLine) else plain(str(w.content))
            for w in trial_widgets(trials)]


UNSAMPLED = "_unsampled"  # marks an entry of `running_trials` its agent has not sampled yet
RUNNING_CAP = 100  # running trials listed under one agent at most (each takes three lines)


def _containers(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's allocations as its slots hold them (what its row counts), each once."""
    seen: dict[str, dict[str, Any]] = {}
    for slot in (agent.get("slots") or {}).values():
        container = slot.get("container") if isinstance(slot, dict) else None
        if isinstance(container, dict) and container.get("id"):
            seen.setdefault(str(container["id"]), container)
    return list(seen.values())


def running_trials(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials running on an agent: one per allocation its slots hold (the master names
    each one's trial), with its resources where the agent has sampled it, else marked
    `UNSAMPLED`; and any sampled trial whose slots the agent's row no longer shows. Never
    fewer than either says run."""
    sampled = [t for t in agent.get("trialResources") or [] if isinstance(t, dict)]
    by_trial = {t.get("trialId"): t for t in sampled}
    by_alloc = {str(t.get("allocationId", "")).partition(".")[2]: t for t in sampled}
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    for c in _containers(agent):
        found = by_trial.get(c["trialId"]) if c.get("trialId") is not None else None
        found = found or by_alloc.get(str(c["id"]).rpartition(".")[0])
        if found is not None and id(found) not in used:
            used.add(id(found))
            out.append(found)
        elif found is None:
            out.append({UNSAMPLED: True, "trialId": c.get("trialId"),
                        "experimentId": c.get("experimentId"), "containerId": c["id"]})
    return out + [t for t in sampled if id(t) not in used]


def agent_rows(agents: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for a in agents:
        slots = list((a.get("slots") or {}).values())
        used = [s for s in slots if s.get("container")]
        kinds = sorted({str(s.get("device", {}).get("type", "")).removeprefix("TYPE_")
                        for s in slots})
        tel = a.get("telemetry") or {}
        allocs = sorted({str((s.get("container") or {}).get("id", ""))[:12] for s in used} - {""})
        rows.append((str(a["id"]), {
            "id": a["id"], "host": a.get("hostname", ""),
            "pool": ",".join(a.get("resourcePools") or []), "slots": len(slots),
            "used": len(used), "type": ",".join(k.lower() for k in kinds),
            "cpu": f"{tel['cpuPercent']:.0f}" if isinstance(tel.get("cpuPercent"), int | float)
            else "", "mem": _gib(tel.get("memUsed"), tel.get("memTotal")),
            "enabled": "yes" if a.get("enabled", True) else "no (draining)",
            "allocations": ", ".join(allocs), "_agent": a}))
    return rows


def slots_text(total: int, used: int) -> str:
    """"3 slots, 1 in use": how the title, each pool and each agent say it."""
    return f"{total} slot{'' if total == 1 else 's'}, {used} in use"


POOLS_SHOWN = 8  # pools named in the title at most


def pools_text(pools: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """Each pool's slots and slots in use, summed over its agents' rows (`agent_rows`: the
    live count the table shows; the pools' list, read once, gives the names and scheduler)."""
    names = list(dict.fromkeys([str(p.get("name", "")) for p in pools] +
                               [n for r in rows for n in str(r.get("pool", "")).split(",") if n]))
    kinds = {str(p.get("name", "")): str(p.get("schedulerType", "")) for p in pools}
    parts = []
    for name in names[:POOLS_SHOWN]:
        mine = [r for r in rows if name in str(r.get("pool", "")).split(",")]
        kind = kinds.get(name, "").removeprefix("SCHEDULER_TYPE_").lower().replace("_", " ")
        parts.append(f"{name}{f' ({kind})' if kind else ''}: "
                     + slots_text(sum(r["slots"] for r in mine), sum(r["used"] for r in mine)))
    more = f"; {len(names) - POOLS_SHOWN} more" if len(names) > POOLS_SHOWN else ""
    if not names:
        return "no pools, no agents connected"
    return ("pool " if len(names) == 1 else "pools: ") + "; ".join(parts) + more


class ClusterScreen(ApiScreen):
    TABLE = "#agents"
    pools: list[dict[str, Any]] = []  # the master's pools, read at mount and reconnection
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("E", "enable(True)", "Enable agent"),
        Binding("D", "enable(False)", "Disable agent"),
        Binding("s", "sort_next", "Sort"),
    ]
    DEFAULT_CSS = """
    ClusterScreen #title, ClusterScreen .section { background: $boost; padding: 0 1;
                                                    text-style: bold; }
    ClusterScreen #agents { height: 12; }
    ClusterScreen #detail { height: 1fr; }
    ClusterScreen .spark { color: $success; margin: 0 1 1 1; }
    ClusterScreen .metric { padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield Header()
        yield Plain("Cluster", id="title")
        yield RowTable(COLUMNS, id="agents")
        yield Plain("", classes="section", id="detail-title")
        yield VerticalScroll(id="detail")
        yield KeyBar()

    def on_mount(self) -> None:
        self.table.focus()
        self.run_feed()
        self.load_pools()

    @work(exclusive=True, group="feed")
    async def run_feed(self) -> None:
        await self.feed("agents", self.table, agent_rows)

    @work(exclusive=True, group="pools")
    async def load_pools(self) -> None:
        try:
            self.pools = await self.client.pools()
        except Exception:  # noqa: BLE001
            return
        if self.live:
            self.show_pools()

    def show_pools(self) -> None:
        """The pools' slots as the agents' rows count them, at each change of the agents (the
        pools' list is read once: its names and scheduler)."""
        agents = [r for k in self.table.keys if (r := self.table.row(k)) is not None]
        self.show("#title", f"Cluster — {pools_text(self.pools, agents)}")

    def on_feed(self, topic: str) -> None:
        # the table as tall as its agents (a header and a spare line), at most AGENT_ROWS: at
        # 80x24 the selected agent's running trials then show below it
        self.table.styles.height = min(AGENT_ROWS, self.table.total_count + 2)
        self.show_pools()
        self.show_detail()

    def reconnected(self) -> None:
        self.load_pools()

    @on(RowTable.CursorMoved, "#agents")
    def _moved(self, _: RowTable.CursorMoved) -> None:
        self.show_detail()

    def show_detail(self) -> None:
        key = self.table.cursor_key
        row = self.table.row(key) if key else None
        detail = self.query_one("#detail", VerticalScroll)
        if row is None:
            return
        agent = row["_agent"]
        tel = agent.get("telemetry") or {}
        history = tel.get("history") or {}
        widgets: list[Any] = []
        gpus = tel.get("gpus") or []
        if gpus:
            for gpu in gpus:
                widgets.append(Plain(
                    f"GPU {gpu.get('index')}{f' ({name})' if (name := gpu.get('name')) else ''}: "
                    f"{_num(gpu.get('util'))}% util, "
                    f"{_gib(gpu.get('memUsed'), gpu.get('memTotal'))}, "
                    f"{_num(gpu.get('temperature'))}°C, {_num(gpu.get('power'))} W, "
                    f"{len(gpu.get('processes') or [])} process(es)",
                    classes="metric"))
                series = (history.get("gpuUtil") or {}).get(str(gpu.get("index"))) or []
                widgets.append(_spark(series))
        else:
            # The agent's note says "no NVIDIA GPU found (why)...": keep the why only.
            why = str(agent.get("noGpuReason") or "").removeprefix("no NVIDIA GPU found")
            why = why.strip(" :;") or "NVML found none"
            why = why if why.startswith("(") else f"({why})"
            widgets.append(Plain(f"No NVIDIA GPU on {agent['id']} {why}. CPU and memory come "
                                  "from psutil.", classes="metric"))
        cpu = tel.get("cpuPercent")
        widgets.append(Plain(f"CPU {cpu:.0f}%" if isinstance(cpu, int | float) else "CPU ?",
                              classes="metric"))
        widgets.append(_spark(history.get("cpu") or []))
        widgets.append(Plain(f"Memory {_gib(tel.get('memUsed'), tel.get('memTotal'))}",
                              classes="metric"))
        widgets.append(_spark(history.get("mem") or []))
        if "trialResources" in agent:
            trials = running_trials(agent)
            more = (f" (the first {RUNNING_CAP} listed)" if len(trials) > RUNNING_CAP else "")
            widgets.append(Plain(f"Running trials: {len(trials)}{more}" if trials
                                 else "Running trials: none", classes="section"))
            widgets.extend(trial_widgets(trials[:RUNNING_CAP]))
        else:  # a master from before per-trial resources: its allocations' latest only
            for alloc_id, usage in sorted((tel.get("allocations") or {}).items()):
                widgets.append(Plain(
                    f"allocation {alloc_id}: CPU {usage.get('cpuPercent', 0):.0f}%, "
                    f"RSS {usage.get('rss', 0) / 2**20:.0f} MiB", classes="metric"))
        self.show("#detail-title", f"{agent['id']}: {slots_text(row['slots'], row['used'])}")
        with self.app.batch_update():
            detail.remove_children()
            detail.mount_all(widgets)

    async def action_enable(self, enabled: bool) -> None:
        key = self.table.cursor_key
        if key is None:
            self.notify("no agent selected", severity="warning")
            return
        verb = "enable" if enabled else "disable"
        await self.call(f"{verb} agent {key}",
                        lambda: self.client.set_agent_enabled(key, enabled))

