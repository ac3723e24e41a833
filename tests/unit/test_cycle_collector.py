"""The master's cycle-collector policy: no automatic full collection while a master runs, one
on a timer instead; the thresholds found are put back when the last master stops."""

from __future__ import annotations

import asyncio
import gc

import pytest

from dettui.master import cycle_collector


async def test_full_collections_run_on_the_timer_only(monkeypatch: pytest.MonkeyPatch) -> None:
    found = gc.get_threshold()
    full: list[int] = []
    monkeypatch.setattr(cycle_collector.gc, "collect",
                        lambda generation=2: full.append(generation) or 0)
    async with cycle_collector.old_generation_on_a_timer(every=0.05):
        assert gc.get_threshold() == (found[0], found[1], cycle_collector.NEVER)
        async with cycle_collector.old_generation_on_a_timer(every=3600):  # a second master
            assert gc.get_threshold()[2] == cycle_collector.NEVER
        assert gc.get_threshold()[2] == cycle_collector.NEVER  # the first still runs
        await asyncio.sleep(0.3)
        assert len(full) >= 2 and set(full) == {2}
    assert gc.get_threshold() == found
    before = len(full)
    await asyncio.sleep(0.15)
    assert len(full) == before  # the timer ended with its master


def test_young_generations_are_still_collected_automatically() -> None:
    async def main() -> tuple[int, int]:
        async with cycle_collector.old_generation_on_a_timer(every=3600):
            young = gc.get_stats()[0]["collections"]
            for _ in range(gc.get_threshold()[0] * 3):
                a: list[object] = []
                a.append(a)  # a cycle: collected young
            return young, gc.get_stats()[0]["collections"]

    before, after = asyncio.run(main())
    assert after > before
