"""tests/poll.py: the one way tests wait for something."""

from __future__ import annotations

import itertools

import pytest

from tests.poll import until, until_async


def test_until_returns_the_first_value_that_holds() -> None:
    counter = itertools.count()
    assert until(lambda: next(counter), "a count above 3", done=lambda n: n > 3) == 4


def test_until_names_what_it_awaited_and_the_last_value_seen() -> None:
    with pytest.raises(AssertionError) as caught:
        until(lambda: {"state": "RUNNING"}, "the trial to end", timeout=0.05,
              done=lambda t: t["state"] == "COMPLETED")
    assert "the trial to end" in str(caught.value)
    assert "'RUNNING'" in str(caught.value)


async def test_until_async_awaits_a_coroutine_check() -> None:
    counter = itertools.count()

    async def probe() -> int:
        return next(counter)

    assert await until_async(probe, "a count of 2", done=lambda n: n == 2) == 2


async def test_until_async_names_what_it_awaited_on_timeout() -> None:
    with pytest.raises(AssertionError, match=r"the queue to drain; last seen: \[1, 2\]"):
        await until_async(lambda: [1, 2], "the queue to drain", timeout=0.05, done=lambda q: not q)


def test_a_multiline_value_is_shown_as_it_reads() -> None:
    with pytest.raises(AssertionError, match="last seen: \nline one\nline two"):
        until(lambda: "line one\nline two", "a third line", timeout=0.05,
              done=lambda screen: "three" in screen)
