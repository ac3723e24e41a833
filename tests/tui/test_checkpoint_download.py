"""In the dashboard, `d` on an experiment's checkpoints downloads the selected one into
./checkpoints/<uuid>, with its progress shown, byte for byte what storage holds."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from dettui.commands.dashboard import Dashboard
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


async def test_d_downloads_the_selected_checkpoint(served: Served, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: ckpts
        entrypoint: python3 train.py
        searcher: {name: single, metric: x, smaller_is_better: false}
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
        await until_async(has_rows(app, "#checkpoints", 1), "its checkpoints")
        ckpts = table(app, "#checkpoints")
        uuid = next(k for k in ckpts.keys if ckpts.row(k)["state"] == "COMPLETED")
        ckpts.move_cursor_to_key(uuid)
        await pilot.press("d")
        await until_async(notified(app, "MiB in checkpoints"), "the download")
    got, kept = tmp_path / "checkpoints" / uuid, served.state_dir / "checkpoints" / uuid
    assert sorted(p.name for p in got.iterdir()) == ["metadata.json", "weights.bin"]
    assert filecmp.cmp(got / "weights.bin", kept / "weights.bin", shallow=False)
