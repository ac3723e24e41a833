"""The cluster screen's running trials under their agent (issue 33, item 4): per trial its
CPU % and RSS with sparklines, GPU utilisation and memory where NVML gave them, beside the
agent-wide readings. Fixed data at the API boundary (`trialResources` of GET /api/v1/agents,
as the master serves them); pilot tests and snapshots at 80x24 and 200x50."""

from __future__ import annotations

from typing import Any

import pytest

from dettui.screens.cluster import BLOCKS, trial_texts
from tests.poll import until_async
from tests.tui.fixed import AGENT, FixedDashboard, trial_resources
from tests.tui.fixed import RESOURCE_AGENT as SAMPLED_AGENT
from tests.tui.fixed import RESOURCE_GPU_AGENT as SAMPLED_GPU_AGENT
from tests.tui.test_cluster_counts import holding
from tests.tui.test_snapshots import SIZES, keys

# the agents with their trials' allocations on their slots, as the master serves them
RESOURCE_AGENT = holding(SAMPLED_AGENT)
RESOURCE_GPU_AGENT = holding(SAMPLED_GPU_AGENT)


def _detail(app: Any) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query("#detail Static"))


@pytest.mark.parametrize("size", SIZES)
async def test_an_agents_running_trials_with_their_sparklines(size: str) -> None:
    app = FixedDashboard([RESOURCE_AGENT, RESOURCE_GPU_AGENT])
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.press("3")
        text = await until_async(lambda: _detail(app), "the agent's running trials",
                                 done=lambda t: "Trial 4" in t)
        assert "Running trials: 2" in text
        assert "Trial 1 · experiment 1 · CPU 97% · RSS 310 MiB" in text
        assert "Trial 4 · experiment 1 · CPU 12% · RSS 41 MiB" in text
        assert "GPU" not in text.split("Running trials")[1]  # no NVML on this agent
        lines = text.splitlines()
        cpu = [line for line in lines if line.startswith("CPU ") and "max" in line]
        rss = [line for line in lines if line.startswith("RSS ")]
        assert len(cpu) == len(rss) == 2
        assert "max 195%" in cpu[0] and "max 310 MiB" in rss[0]
        assert sum(ch in BLOCKS for ch in cpu[0]) >= 60  # the minute of history drawn
        # the agent-wide readings stay
        assert "CPU 48%" in text and "Memory 3.0/8.0 GiB" in text
        await pilot.press("down")  # the GPU agent: its trial's GPU use
        text = await until_async(lambda: _detail(app), "the GPU agent's trial",
                                 done=lambda t: "Trial 7" in t)
        assert "Trial 7 · experiment 2 · CPU 105% · RSS 5.0 GiB · GPU 93%, 31.0 GiB" in text
        assert "GPU 0 (NVIDIA A100-SXM4-40GB): 93% util" in text


async def test_an_agent_without_trials_says_so_and_an_older_master_keeps_its_lines() -> None:
    idle = holding({**AGENT, "id": "idle", "trialResources": []})  # no slot in use
    app = FixedDashboard([idle, {**AGENT, "id": "older"}])
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        await pilot.press("3")
        text = await until_async(lambda: _detail(app), "the idle agent",
                                 done=lambda t: "Running trials" in t)
        assert "Running trials: none" in text
        await pilot.press("down")
        text = await until_async(lambda: _detail(app), "the older master's agent",
                                 done=lambda t: "allocation 1.abc.1" in t)
        assert "CPU 97%, RSS 300 MiB" in text and "Running trials" not in text


def test_trial_lines_take_what_the_master_may_leave_out() -> None:
    """A trial with one sample, and one whose fields are missing or odd, still draw."""
    one = trial_resources(9, 3, [0.0], [1])
    odd = {"trialId": 10, "experimentId": 3, "history": "nonsense", "gpuUtil": 50.0}
    texts = [t.plain for t in trial_texts([one, odd])]
    assert texts[0] == "Trial 9 · experiment 3 · CPU 0% · RSS 1 MiB"
    assert texts[3] == "Trial 10 · experiment 3 · CPU ?% · RSS ? · GPU 50%, ?"
    assert "(no samples yet)" in texts[4] and "(no samples yet)" in texts[5]


@pytest.mark.parametrize("size", SIZES)
def test_cluster_with_running_trials(snap_compare: Any, size: str) -> None:
    assert snap_compare(FixedDashboard([RESOURCE_AGENT, RESOURCE_GPU_AGENT]),
                        terminal_size=SIZES[size], run_before=keys("3"))


@pytest.mark.parametrize("size", SIZES)
def test_cluster_with_a_gpu_trial(snap_compare: Any, size: str) -> None:
    assert snap_compare(FixedDashboard([RESOURCE_GPU_AGENT]),
                        terminal_size=SIZES[size], run_before=keys("3"))


# --- the real thing: `dettui serve` with its agent, a running trial, the dashboard ---------

BUSY = "import time\nballast = b'x' * (50 * 2**20)\nend = time.time() + 120\n" \
       "while time.time() < end:\n    pass\n"
BUSY_CONFIG = """
name: busy
entrypoint: python3 busy.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
hyperparameters: {}
max_restarts: 0
"""


async def test_a_real_trial_under_the_real_agent(served: Any, tmp_path: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from dettui.commands.dashboard import Dashboard

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "busy.py").write_text(BUSY)
    (tmp_path / "busy.yaml").write_text(BUSY_CONFIG)
    served.cli("experiment", "create", str(tmp_path / "busy.yaml"), str(ctx))
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(served.config_dir))
    app = Dashboard(served.url, tmp_path / "unused")
    try:
        async with app.run_test(size=SIZES["200x50"]) as pilot:
            await pilot.press("3")
            text = await until_async(lambda: _detail(app), "the trial under its agent",
                                     timeout=90, done=lambda t: "max" in t and "Trial 1" in t)
            assert "Running trials: 1" in text and "Trial 1 · experiment 1 · CPU" in text
            rss = next(line for line in text.splitlines() if line.startswith("RSS "))
            assert "MiB" in rss or "GiB" in rss
    finally:
        served.cli("experiment", "kill", "1", check=False)
