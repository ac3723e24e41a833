"""What an ended experiment tells a newcomer (issue 31 review: N3, N4, N7, N13, N17): the
cause of an ERROR (its trial's exit and last line, not a complaint about validations it never
got), the kept progress of an ERROR or CANCELED one in every view, a legend for `!`, every
trial's logs under `e create --follow`, and downloads named as the dashboard names them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dettui import byte_size
from tests.conftest import Served
from tests.e2e.test_search import created
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = [pytest.mark.slow, pytest.mark.both_ways]  # trials forked and fresh (conftest)

PROGRESS = """
import time
from dettui import core

with core.init() as ctx:
    ctx.train.report_progress(0.25)
    time.sleep(600)
"""

GRID = """
import sys, time
from dettui import core

with core.init() as ctx:
    x = core.get_cluster_info().trial.hparams["x"]
    if x == 2:
        print("x=2 is not allowed", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(2)
    print("done with x=1", flush=True)
"""

REPORTS = """
from dettui import core

with core.init() as ctx:
    for step in (1, 2):
        ctx.train.report_validation_metrics(steps_completed=step,
                                            metrics={"val_loss": 1.0 / step})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
            (path / "w").write_text(str(step))
"""


def ctx_in(tmp_path: Path, name: str, config: str, files: dict[str, str]) -> tuple[Path, Path]:
    (tmp_path / name).mkdir()
    return write_ctx(tmp_path / name, config, files)


def test_an_error_says_its_cause_and_every_view_keeps_progress(served: Served,
                                                                tmp_path: Path) -> None:
    cfg, ctx = ctx_in(tmp_path, "crash", """
        name: crash
        entrypoint: sh -c "cd sub && python3 train.py"
        searcher: {name: single, metric: validation_loss}
        max_restarts: 1
        """, {"train.py": "print('never')\n"})
    crash = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(crash)
    assert exp["state"] == "STATE_ERROR"
    trial = exp["trialIds"][0]
    assert len(exp["warnings"]) == 1, exp["warnings"]  # not "no validation reported ..."
    assert exp["warnings"][0].startswith(f"trial {trial} exited with code 2 (")
    assert "can't cd to sub" in exp["warnings"][0] and exp["warnings"][0].endswith(
        ") after 1 restart")
    described = served.cli("e", "describe", str(crash)).stdout
    assert f"warning: trial {trial} exited with code 2" in described
    assert "no validation reported" not in described
    cfg, ctx = ctx_in(tmp_path, "mute", """
        name: mute
        entrypoint: sh -c "exit 4"
        searcher: {name: single, metric: loss}
        max_restarts: 0
        """, {"train.py": ""})
    mute = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    exp = served.wait_experiment(mute)
    assert exp["warnings"] == [f"trial {exp['trialIds'][0]} exited with code 4"]  # no notes
    nothing = served.cli("e", "download", str(crash), "-o", str(tmp_path / "dl"), check=False)
    assert nothing.returncode == 1, nothing
    assert f"experiment {crash} has no completed checkpoint" in nothing.stderr

    cfg, ctx = ctx_in(tmp_path, "slow", """
        name: slow
        entrypoint: python3 train.py
        searcher: {name: single, metric: loss}
        """, {"train.py": PROGRESS})
    slow = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    until(lambda: served.api("GET", f"/api/v1/experiments/{slow}")["experiment"]["progress"],
          "its progress", done=lambda p: p == 0.25)
    served.cli("e", "kill", str(slow))
    assert served.wait_experiment(slow)["state"] == "STATE_CANCELED"
    listed = served.cli("e", "list").stdout
    row = next(line for line in listed.splitlines() if " slow " in line)
    assert "CANCELED" in row and "25%" in row, listed  # as e describe and the JSON
    assert "25%" in served.cli("e", "describe", str(slow)).stdout
    crashed = next(line for line in listed.splitlines() if " crash " in line)
    assert "! ERROR" in crashed and "0%" in crashed, listed
    assert f"! the experiment has warnings: dettui e describe {crash}" in listed


def test_follow_streams_every_trial_and_the_end(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: grid
        entrypoint: python3 train.py
        searcher: {name: grid, metric: loss}
        hyperparameters:
          x: {type: categorical, vals: [1, 2]}
        max_restarts: 0
        """, {"train.py": GRID})
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow").stdout
    exp = served.api("GET", "/api/v1/experiments/1")["experiment"]
    trials = {t["hparams"]["x"]: t["id"]
              for t in served.api("GET", "/api/v1/experiments/1/trials")["trials"]}
    lines = out.splitlines()
    assert any(line.startswith(f"trial {trials[2]} ") and "x=2 is not allowed" in line
               for line in lines), out
    assert any(line.startswith(f"trial {trials[1]} ") and "done with x=1" in line
               for line in lines), out
    assert f"Experiment 1 ended: {exp['state'].removeprefix('STATE_')}" in out
    assert f"warning: trial {trials[2]} exited with code 3 (x=2 is not allowed)" in out


def test_downloads_are_named_as_in_the_dashboard(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: ckpts
        entrypoint: python3 train.py
        searcher: {name: single, metric: val_loss}
        """, {"train.py": REPORTS})
    exp_id = created(served.cli("e", "create", str(cfg), str(ctx)).stdout)
    served.wait_experiment(exp_id)
    ckpts = served.api("GET", f"/api/v1/experiments/{exp_id}/checkpoints")["checkpoints"]
    best = next(c for c in ckpts if c["metadata"]["steps_completed"] == 2)
    out = tmp_path / ("a-rather-long-folder-name-" * 3)
    env = {**served.env(), "COLUMNS": "80"}
    got = subprocess.run([sys.executable, "-m", "dettui.cli", "-m", served.url, "e",
                          "download", str(exp_id), "-o", str(out)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert got.returncode == 0, got
    folder = out / f"exp-{exp_id}-trial-{best['training']['trialId']}-step-2-{best['uuid'][:8]}"
    assert (folder / "w").read_text() == "2"
    size = byte_size.human(sum(int(v) for v in best["resources"].values()))  # as `e describe`
    assert got.stdout == f"{best['uuid']} -> {folder} ({size})\n", got.stdout  # one line
    one = subprocess.run([sys.executable, "-m", "dettui.cli", "-m", served.url, "checkpoint",
                          "download", best["uuid"]], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert one.returncode == 0, one
    assert (tmp_path / "checkpoints" / best["uuid"] / "w").is_file()  # det's default place


def test_ctrl_c_on_follow_says_the_experiment_keeps_running(served: Served,
                                                           tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: long
        entrypoint: python3 train.py
        searcher: {name: single, metric: loss}
        """, {"train.py": "import time\nprint('hello', flush=True)\ntime.sleep(600)\n"})
    proc = subprocess.Popen([sys.executable, "-m", "dettui.cli", "-m", served.url, "e", "create",
                             str(cfg), str(ctx), "--follow"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=served.env())
    try:
        assert proc.stdout is not None
        seen = ""
        while "hello" not in seen:
            line = proc.stdout.readline()
            assert line, "the trial's line"
            seen += line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "stopped following; experiment 1 keeps running (dettui e kill 1 stops it)" in err
    assert served.api("GET", "/api/v1/experiments/1")["experiment"]["state"] == "STATE_ACTIVE"
    served.cli("e", "kill", "1")
