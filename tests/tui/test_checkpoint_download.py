"""In the dashboard, `d` on an experiment downloads the checkpoint the user sees selected (the
highlighted trial's best, or the checkpoints table's row when it has the focus) into a folder
the user confirms, named readably (exp-1-trial-1-step-2-<uuid8>), byte for byte what storage
holds (issue 31, smaller list)."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from textual.widgets import Input

from dettui.commands.dashboard import Dashboard
from dettui.screens.dialogs import PathPrompt
from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.poll import until_async
from tests.tui.test_dashboard import has_rows, notified, table

pytestmark = pytest.mark.slow

TRAIN = """
import os
from determined import core
with core.init() as ctx:
    for step in (1, 2):
        ctx.train.report_validation_metrics(steps_completed=step, metrics={"x": step})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            (path / "weights.bin").write_bytes(os.urandom(200_000))
"""


async def test_d_downloads_the_highlighted_trials_checkpoint_where_the_user_says(
        served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the trials, `d` takes the highlighted trial's best checkpoint; on the checkpoints
    table, its selected row. Either way a dialog shows the folder (readable: experiment, trial,
    step) and the user may change it; nothing lands in the working directory unasked."""
    cfg, ctx = write_ctx(tmp_path, """
        name: ckpts
        entrypoint: python3 train.py
        searcher: {name: single, metric: x, smaller_is_better: true}
        """, {"train.py": TRAIN})
    served.cli("e", "create", str(cfg), str(ctx))
    served.wait_experiment(1)
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(served.config_dir))
    monkeypatch.chdir(tmp_path)
    app = Dashboard(served.url, tmp_path / "unused")
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until_async(has_rows(app, "#experiments", 1), "the experiment")
        await pilot.press("enter")
        await until_async(has_rows(app, "#checkpoints", 2), "its checkpoints")
        ckpts = table(app, "#checkpoints")
        by_step = {ckpts.row(k)["steps"]: k for k in ckpts.keys}
        assert table(app, "#trials").has_focus

        # the trial's best: step 1 (x=1, smaller is better; GC keeps it and the latest)
        await pilot.press("d")
        box = await until_async(lambda: prompt_box(app), "the download dialog")
        best = tmp_path / "checkpoints" / f"exp-1-trial-1-step-1-{by_step[1][:8]}"
        assert box.value == str(best)
        await pilot.press("enter")
        await until_async(notified(app, f" in {best}"),
                          lambda: f"the download: {toasts(app)}")

        ckpts.focus()  # the checkpoints table: its selected row, into a folder typed
        ckpts.move_cursor_to_key(by_step[2])
        await pilot.pause(0.2)
        await pilot.press("d")
        box = await until_async(lambda: prompt_box(app), "the download dialog")
        assert box.value.endswith(f"exp-1-trial-1-step-2-{by_step[2][:8]}"), box.value
        box.value = str(tmp_path / "mine")
        await pilot.press("enter")
        await until_async(notified(app, f" in {tmp_path / 'mine'}"),
                          lambda: f"the download: {toasts(app)}")

    for got, uuid in ((best, by_step[1]), (tmp_path / "mine", by_step[2])):
        kept = served.state_dir / "checkpoints" / uuid
        assert sorted(p.name for p in got.iterdir()) == ["metadata.json", "weights.bin"]
        assert filecmp.cmp(got / "weights.bin", kept / "weights.bin", shallow=False)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [best.name]


def toasts(app: Dashboard) -> list[str]:
    return [str(n.message) for n in app._notifications]


def prompt_box(app: Dashboard) -> Input | None:
    return app.screen.query_one("#answer", Input) if isinstance(app.screen, PathPrompt) else None
