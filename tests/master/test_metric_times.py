"""The compare screen's time axis reads a few report times per trial through the client
(`Client.metric_times`), from the real master: the first and the last report and others evenly
between, never the whole history; a short history in one page."""

from __future__ import annotations

from dettui.client import Client
from tests.master.conftest import SIMPLE_CONFIG, Api, allocate
from tests.master.test_api import create


async def test_metric_times_reads_evenly_spread_report_times(api: Api) -> None:
    await create(api, SIMPLE_CONFIG)
    _, alloc_token = await allocate(api, 1, "agent-x", [0])
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"}
    for steps in range(1, 101):  # a report every 10 s from 12:00:00
        minute, second = divmod((steps - 1) * 10, 60)
        await api.call("POST", "/api/v1/trials/1/metrics", {"group": "training", "metrics": {
            "trialId": 1, "trialRunId": 1, "stepsCompleted": steps,
            "reportTime": f"2026-11-22T12:{minute:02d}:{second:02d}+00:00",
            "metrics": {"avgMetrics": {"loss": 1 / steps}}}}, headers=task)
    for steps in (10, 20):
        await api.call("POST", "/api/v1/trials/1/metrics", {"group": "validation", "metrics": {
            "trialId": 1, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": {"loss": 0.5}}}}, headers=task)
    async with Client(str(api.client.make_url("")).rstrip("/"), api.token) as client:
        times = await client.metric_times(1, "training", 5)
        assert [s for s, _ in times] == [1, 26, 51, 75, 100]  # offsets 0, 25, 50, 74, 99
        assert times[0][1].startswith("2026-11-22T12:00:00")
        assert times[-1][1].startswith("2026-11-22T12:16:30")  # (100 - 1) * 10 s
        short = await client.metric_times(1, "validation", 5)
        assert [s for s, _ in short] == [10, 20]
        assert await client.metric_times(1, "nothing", 5) == []
