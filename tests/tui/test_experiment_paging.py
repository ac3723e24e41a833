"""The experiment screen reads a trial's metrics once, downsampled to the chart's width, then
only the reports past its cursor (appended); its checkpoints are read again only when a
trial's checkpoints changed, a page of the newest with the total."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dettui.commands.dashboard import Dashboard
from dettui.screens.experiment import ExperimentScreen
from tests.conftest import Served
from tests.poll import until_async
from tests.tui.test_dashboard import has_rows

pytestmark = pytest.mark.slow
CONFIG = "checkpoint_storage: {type: directory, container_path: %s}\nname: detached\n"


def report(s: Served, tid: int, *steps: int) -> None:
    s.api("POST", f"/api/v1/trials/{tid}/metrics/batch", {"reports": [
        {"group": "validation", "metrics": {
            "trialId": tid, "trialRunId": 1, "stepsCompleted": n,
            "metrics": {"avgMetrics": {"unmanaged": 1 / n, "acc": n}}}} for n in steps]})


def detached(s: Served, tmp: Path) -> tuple[int, dict[str, Any]]:
    exp = s.api("POST", "/api/v1/experiments", {"config": CONFIG % (tmp / "ckpts"),
                                                 "unmanaged": True})["experiment"]
    trial = s.api("POST", "/api/v1/trials", {"experimentId": exp["id"], "hparams": None,
                                             "unmanaged": True})["trial"]
    s.api("POST", f"/api/v1/trials/{trial['id']}/start", {"trialId": trial["id"],
                                                         "resume": True})
    return int(exp["id"]), trial


async def test_the_chart_appends_and_checkpoints_wait_for_a_change(
        headless: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(headless.config_dir))
    exp_id, trial = detached(headless, tmp_path)
    tid = trial["id"]
    report(headless, tid, *range(1, 301))
    app = Dashboard(headless.url, tmp_path / "unused")
    async with app.run_test(size=(120, 40)) as pilot:
        await until_async(lambda: getattr(app, "client", None) is not None, "the client")
        reads: list[str] = []
        page = app.client.page

        async def counted(path: str, *args: Any, **kwargs: Any) -> Any:
            reads.append(path)
            return await page(path, *args, **kwargs)

        app.client.page = counted  # type: ignore[method-assign]
        screen = ExperimentScreen(exp_id)
        await app.push_screen(screen)
        await until_async(has_rows(app, "#trials", 1), "the trial")
        await until_async(lambda: screen.cursor == 300, "the chart's first read")
        assert screen.chart_reads == {"series": 1, "appended": 0}
        width = screen.query_one("#chart").size.width
        assert 2 <= len(screen.points["unmanaged"]) <= max(width, 20) < 300
        assert screen.points["acc"][0] == (1, 1) and screen.points["acc"][-1] == (300, 300)
        await until_async(lambda: reads != [], "the checkpoints' first read")
        await asyncio.sleep(0.5)
        ckpt_reads = len(reads)
        for steps in range(301, 306):
            report(headless, tid, steps)  # one at a time: several diffs, each appended
        await until_async(lambda: screen.cursor == 305, "the new reports")
        assert screen.chart_reads == {"series": 1, "appended": 5}
        assert screen.points["acc"][-1] == (305, 305)
        assert len(reads) == ckpt_reads, "metrics alone do not re-read checkpoints"
        headless.api("POST", "/api/v1/checkpoints", {
            "uuid": "00000000-0000-4000-8000-000000000001", "taskId": trial["taskId"],
            "allocationId": None, "reportTime": "2026-11-22T04:56:55+00:00",
            "resources": {"w": "1"}, "metadata": {"steps_completed": 305},
            "state": "STATE_COMPLETED"})
        await until_async(has_rows(app, "#checkpoints", 1), "the new checkpoint")
        assert len(reads) == ckpt_reads + 1
        await pilot.press("m")  # another metric: drawn from what is there, nothing re-read
        await pilot.pause()
        assert screen.chart_reads["series"] == 1
