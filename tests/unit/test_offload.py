"""Work in the master's worker processes: results and errors come back whole, a worker that
dies is replaced, and the workers are other processes than the master."""

from __future__ import annotations

import os

import pytest

from dettui.errors import InvalidArgument, TooLarge
from dettui.master import offload
from dettui.paths import checkpoint_uuid


async def test_results_and_errors_come_back() -> None:
    assert await offload.isolated(os.getpid) != os.getpid()
    assert await offload.isolated(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
    with pytest.raises(InvalidArgument, match="must be a UUID"):
        await offload.isolated(checkpoint_uuid, "../../etc", "uuid")
    with pytest.raises(ValueError, match="invalid literal"):
        await offload.isolated(int, "x")


async def test_a_worker_that_dies_is_replaced() -> None:
    with pytest.raises(TooLarge, match="died"):
        await offload.isolated(os._exit, 3)
    pids = {await offload.isolated(os.getpid) for _ in range(6)}
    assert pids and os.getpid() not in pids
    assert await offload.isolated(len, b"x" * 10_000_000) == 10_000_000
