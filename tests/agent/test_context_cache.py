"""The agent asks the master for an experiment's context once: its other trials on the agent
take the kept copy (a search's trials cost the master no read each); a big context is
fetched for every trial, and only the last few experiments are kept."""

from __future__ import annotations

import asyncio
import collections
from types import SimpleNamespace
from typing import Any, cast

from dettui.agent import allocation
from dettui.agent.allocation import AllocationRun


class Master:
    """The client's one call used here, counting the fetches per task."""

    def __init__(self, sizes: dict[int, int]) -> None:
        self.sizes = sizes
        self.asked: list[str] = []

    async def context_directory(self, task_id: str) -> bytes:
        self.asked.append(task_id)
        return b"x" * self.sizes[int(task_id.split("-")[0])]


def _run(master: Master, kept: collections.OrderedDict[int, bytes], exp: int,
         trial: int) -> bytes:
    run = AllocationRun.__new__(AllocationRun)
    run.client = cast(Any, master)
    run.contexts = kept
    run.killed = False
    run.spec = cast(Any, SimpleNamespace(task_id=f"{exp}-{trial}", experiment_id=exp))
    return asyncio.run(run._fetch_context())


def test_the_trials_of_one_experiment_fetch_its_context_once() -> None:
    master = Master({1: 100, 2: 200})
    kept: collections.OrderedDict[int, bytes] = collections.OrderedDict()
    for trial in range(5):
        assert _run(master, kept, 1, trial) == b"x" * 100
    assert _run(master, kept, 2, 0) == b"x" * 200
    assert master.asked == ["1-0", "2-0"]


def test_a_big_context_is_fetched_each_time_and_few_are_kept() -> None:
    big = allocation.CONTEXT_KEPT_BYTES + 1
    master = Master({1: big, **{e: 10 for e in range(2, 2 + allocation.CONTEXTS_KEPT + 1)}})
    kept: collections.OrderedDict[int, bytes] = collections.OrderedDict()
    _run(master, kept, 1, 0)
    _run(master, kept, 1, 1)
    assert master.asked == ["1-0", "1-1"] and 1 not in kept
    for exp in range(2, 2 + allocation.CONTEXTS_KEPT + 1):
        _run(master, kept, exp, 0)
    assert len(kept) == allocation.CONTEXTS_KEPT and 2 not in kept  # the oldest went
    _run(master, kept, 2, 1)
    assert master.asked[-1] == "2-1"
