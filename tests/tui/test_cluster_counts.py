"""The cluster screen's counts agree with each other (issue 33, fix round, Y1-Y3): the title's
slots per pool follow the agents as they change (the pools' list is read once), and say it as
each agent does ("3 slots, 1 in use"); the running trials are listed from the allocations the
agent's row counts, a trial not sampled yet as "sampling…"; the agent's CPU and memory
sparklines fit the width (two minutes of samples at 80 columns). Fixed data at the API
boundary (GET /api/v1/agents as the master serves it); pilot tests and snapshots at 80x24 and
200x50."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual.widgets import Static

from dettui.screens.cluster import BLOCKS, running_trials, spark, trial_texts
from dettui.widgets.rowtable import RowTable
from tests.poll import until_async
from tests.tui.fixed import AGENT, FixedClient, FixedDashboard, trial_resources
from tests.tui.test_snapshots import SIZES, keys

LONG = 120  # samples of the agent's history the master keeps (two minutes)
CPU = [float(5 + (i * 7) % 90) for i in range(LONG)]


def alloc_id(trial_id: int, exp_id: int = 1) -> str:
    """An allocation id: "<experiment>.<request uuid>.<run>" (uuids differ from the start)."""
    return f"{exp_id}.{trial_id:08x}-3f4d-4e6f-8a9b-0b5e2c1a5d7e.1"


def sampled(trial_id: int, exp_id: int = 1, **kw: Any) -> dict[str, Any]:
    """`trial_resources` of the trial's allocation (`alloc_id`)."""
    return {**trial_resources(trial_id, exp_id, **kw), "allocationId": alloc_id(trial_id, exp_id)}


def container(trial_id: int, exp_id: int = 1) -> dict[str, Any]:
    """A slot's container as the master serves it: the allocation id without the experiment id
    and the rank, with the allocation and trial it runs."""
    alloc = alloc_id(trial_id, exp_id)
    return {"id": f"{alloc.partition('.')[2]}.0", "state": "STATE_RUNNING", "devices": [],
            "allocationId": alloc, "trialId": trial_id, "experimentId": exp_id}


def holding(agent: dict[str, Any]) -> dict[str, Any]:
    """`agent` with its sampled trials (`trialResources`) on its slots, one slot each in order,
    as the master serves them."""
    trials = [{**t, "allocationId": alloc_id(t["trialId"], t["experimentId"])}
              for t in agent.get("trialResources") or []]
    slots = {k: {**s, "container": container(trials[i]["trialId"], trials[i]["experimentId"])
                 if i < len(trials) else None}
             for i, (k, s) in enumerate(agent["slots"].items())}
    return {**agent, "slots": slots, "trialResources": trials}


def agent(running: list[int], samples: list[int], slots: int = 3) -> dict[str, Any]:
    """vm-local with `slots` CPU slots, trial i of `running` on slot i, those of `samples`
    sampled by the agent, and two minutes of CPU and memory history."""
    mem = [30.0 + i % 10 for i in range(LONG)]
    return {**AGENT, "slots": {
        str(i): {"device": {"type": "TYPE_CPU"},
                 "container": container(running[i]) if i < len(running) else None}
        for i in range(slots)},
        "telemetry": {**AGENT["telemetry"],
                      "history": {"cpu": CPU, "mem": mem, "gpuUtil": {}}},
        "trialResources": [sampled(t, cpu=[20.0, 60.0, 97.0], rss_mib=[100, 180, 250])
                           for t in samples]}


class Starting(FixedClient):
    """The first seconds of a run: three allocations on the agent, two of them sampled; the
    pools' list says what it said when the screen opened (3 slots, 0 in use); then, on
    `end`, the trials end and the agent's slots are free."""

    def __init__(self, agents: list[dict[str, Any]] | None = None) -> None:
        super().__init__(agents)
        self.end = asyncio.Event()

    async def pools(self) -> list[dict[str, Any]]:
        return [{"name": "default", "slotsUsed": 0, "slotsAvailable": 3,
                 "schedulerType": "SCHEDULER_TYPE_PRIORITY"}]

    async def changes(self, topics: list[str], **_: Any) -> AsyncIterator[dict[str, Any]]:
        if topics != ["agents"]:
            async for change in super().changes(topics):
                yield change
            return
        topic = "agents"
        busy = agent([1, 2, 3], [1, 2])
        yield {"topic": topic, "kind": "snapshot", "upsert": [busy], "remove": [],
               "order": [busy["id"]], "total": 1}
        await self.end.wait()
        idle = agent([], [])
        yield {"topic": topic, "kind": "change", "upsert": [idle], "remove": [],
               "order": [idle["id"]], "total": 1}
        await asyncio.Event().wait()


def _text(app: Any, selector: str) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(selector))


def _detail(app: Any) -> str:
    return _text(app, "#detail Static")


@pytest.mark.parametrize("size", SIZES)
async def test_the_title_and_the_agent_count_the_same_slots(size: str) -> None:
    """Y1: the title's pool and the agent's line both say "3 slots, N in use", as the table's
    In use column does, and follow the agents (not the pools' list read at mount)."""
    app = FixedDashboard(client=Starting)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.press("3")
        title = await until_async(lambda: _text(app, "#title"), "the pool's slots in use",
                                  done=lambda t: "in use" in t)
        assert "pool default (priority): 3 slots, 3 in use" in title
        assert _text(app, "#detail-title") == "vm-local: 3 slots, 3 in use"
        table = app.screen.query_one("#agents", RowTable)
        assert (table.row("vm-local") or {})["used"] == 3
        app.client.end.set()
        title = await until_async(lambda: _text(app, "#title"), "the slots freed",
                                  done=lambda t: "0 in use" in t)
        assert "pool default (priority): 3 slots, 0 in use" in title
        detail = await until_async(lambda: _text(app, "#detail-title"), "the agent's line",
                                   done=lambda t: "0 in use" in t)
        assert detail == "vm-local: 3 slots, 0 in use"


@pytest.mark.parametrize("size", SIZES)
async def test_running_trials_are_those_the_agent_row_counts(size: str) -> None:
    """Y2: three allocations, two sampled: three running trials, the third "sampling…"."""
    app = FixedDashboard(client=Starting)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.press("3")
        text = await until_async(lambda: _detail(app), "the agent's running trials",
                                 done=lambda t: "Running trials" in t)
        assert "Running trials: 3" in text
        assert "Trial 1 · experiment 1 · CPU 97% · RSS 250 MiB" in text
        assert "Trial 2 · experiment 1 · CPU 97% · RSS 250 MiB" in text
        assert "Trial 3 · experiment 1 · sampling…" in text
        app.client.end.set()
        text = await until_async(lambda: _detail(app), "no trial running",
                                 done=lambda t: "Running trials: none" in t)


def test_a_container_without_its_trial_is_matched_by_its_allocation() -> None:
    """A master that names no trial on its containers: a container is matched to the sampled
    trial of its allocation (one trial, not two); one with no sample is listed by its id."""
    known = {k: v for k, v in container(1).items() if k == "id"}
    unknown = {"id": "ffffffff-0000.1.0"}
    one = {**AGENT, "slots": {"0": {"container": known}, "1": {"container": unknown},
                              "2": {"container": known}},
           "trialResources": [sampled(1, cpu=[5.0], rss_mib=[1])]}
    texts = [t.plain for t in trial_texts(running_trials(one))]
    assert texts[0] == "Trial 1 · experiment 1 · CPU 5% · RSS 1 MiB"
    assert texts[3:] == ["allocation ffffffff-0000.1.0 · sampling…"]


@pytest.mark.parametrize("size", SIZES)
async def test_the_agents_sparklines_fit_the_width(size: str) -> None:
    """Y3: the CPU and memory sparklines are one line each, the newest samples that fit
    (all 120 at 200 columns), the newest last."""
    app = FixedDashboard(client=Starting)
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.press("3")
        await until_async(lambda: _detail(app), "the agent's detail",
                          done=lambda t: "Memory" in t)
        await pilot.pause()
        sparks = list(app.screen.query("#detail .spark").results(Static))
        assert len(sparks) == 2  # CPU, memory
        for widget in sparks:
            line = str(widget.render())
            assert widget.size.height == 1, line
            assert 0 < len(line) <= widget.content_size.width, line
            assert all(ch in BLOCKS for ch in line)
        cpu = str(sparks[0].render())
        assert len(cpu) == (LONG if size == "200x50" else sparks[0].content_size.width)
        assert cpu == spark(CPU[-len(cpu):])  # the newest samples, the newest last


@pytest.mark.parametrize("size", SIZES)
def test_cluster_while_trials_start(snap_compare: Any, size: str) -> None:
    assert snap_compare(FixedDashboard(client=Starting), terminal_size=SIZES[size],
                        run_before=keys("3"))
