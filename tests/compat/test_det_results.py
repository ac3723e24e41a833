"""Results come back out through the real determined==0.38.1 client: `det checkpoint
describe|download|rm|delete`, `det e download`, `det e list-checkpoints`, and the SDK's
`top_checkpoint()`, `list_checkpoints()`, `get_checkpoint(uuid).download()`,
`trial.iter_metrics()`, `trial.list_checkpoints()`, a checkpoint's `add_metadata`,
`remove_metadata`, `remove_files` and `get_metrics`; downloads straight from storage and
streamed by the master (a tar.gz) give back the same bytes."""

from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import Served
from tests.e2e.test_single import write_ctx

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

TRAIN = """
import os
from types import SimpleNamespace
from determined import core

with core.init() as ctx:
    uuids = {}
    for step in (1, 2, 3):
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        ctx.train.report_validation_metrics(steps_completed=step,
                                            metrics={"val_loss": abs(2 - step) + 0.5})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            (path / "weights.bin").write_bytes(os.urandom(300_000))
            (path / "sub").mkdir()
            (path / "sub" / "note.txt").write_text(f"step {step}")
        uuids[step] = uuid
        print("checkpoint", step, uuid, flush=True)
    # the trial stands here for one that used its best checkpoint (inference): only a trial's
    # own allocation links it, with DET_SESSION_TOKEN (report_task_using_checkpoint reads .uuid)
    ctx.experimental.report_task_using_checkpoint(SimpleNamespace(uuid=uuids[2]))
"""

SDK = """
import json, sys
from determined.experimental import client
client.login(master=sys.argv[1], user="determined", password="")
exp = client.get_experiment(1)
top = exp.top_checkpoint()
trial = exp.list_trials()[0]
out = {
    "top": top.uuid, "top_config_metric": top.training.experiment_config["searcher"]["metric"],
    "top_val": top.training.validation_metrics["avgMetrics"]["val_loss"],
    "listed": [c.uuid for c in exp.list_checkpoints()],
    "trial_listed": sorted(c.uuid for c in trial.list_checkpoints()),
    "validation": [[m.steps_completed, m.metrics["val_loss"]]
                   for m in trial.iter_metrics("validation")],
    "training": [m.steps_completed for m in trial.iter_metrics("training")],
    "direct": top.download(sys.argv[2] + "/direct"),
    "master": client.get_checkpoint(top.uuid).download(sys.argv[2] + "/master",
                                                       mode=client.DownloadMode.MASTER),
}
print(json.dumps(out))
"""

# The SDK's changes to a checkpoint: its metadata record, its files by glob, and the metrics
# of the trials that use it.
SDK_CHANGES = """
import json, sys
from determined.experimental import client
client.login(master=sys.argv[1], user="determined", password="")
uuid = sys.argv[2]
ckpt = client.get_checkpoint(uuid)
ckpt.add_metadata({"tag": "best", "nested": {"a": 1}})
added = client.get_checkpoint(uuid).metadata
ckpt.remove_metadata(["nested"])
removed = client.get_checkpoint(uuid).metadata
ckpt.remove_files(["sub/*"])
after = client.get_checkpoint(uuid)
print(json.dumps({"added": added, "removed": removed, "state": after.state.value,
                  "resources": sorted(after.resources),
                  "metrics": [[m.trial_id, m.steps_completed, m.metrics]
                              for m in ckpt.get_metrics("validation")]}))
"""


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_checkpoints_and_metrics_come_back_out(served: Served, tmp_path: Path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: results
        entrypoint: python3 train.py
        searcher: {name: single, metric: val_loss}
        checkpoint_storage: {save_trial_best: 1, save_trial_latest: 1}
        """, {"train.py": TRAIN})
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120).stdout
    assert "ended: COMPLETED" in out, out
    uuids = {int(line.split()[-2]): line.split()[-1] for line in out.splitlines()
             if "|| checkpoint " in line}
    best, latest = uuids[2], uuids[3]  # val_loss 0.5 at step 2; step 1 is neither: GC'd
    storage = served.state_dir / "checkpoints"
    home = tmp_path / "home"
    home.mkdir()
    assert det(served, home, "user", "login", "determined", stdin="\n").returncode == 0

    listed = det(served, home, "e", "list-checkpoints", "1")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rows = {r.split("|")[4].strip(): [c.strip() for c in r.split("|")]
            for r in listed.stdout.splitlines() if r.count("|") >= 6 and "-" in r.split("|")[4]}
    assert rows[best][2] == "COMPLETED" and rows[best][3] == "0.5", listed.stdout
    assert rows[uuids[1]][2] == "DELETED" and rows[uuids[1]][3] == "1.5", listed.stdout

    described = det(served, home, "checkpoint", "describe", best)
    assert described.returncode == 0, described.stdout + described.stderr
    assert best in described.stdout and '"val_loss": 0.5' in described.stdout

    for mode in ("direct", "master"):
        got = tmp_path / f"det-{mode}"
        res = det(served, home, "checkpoint", "download", best, "-o", str(got), "--mode", mode)
        assert res.returncode == 0, res.stdout + res.stderr
        assert same_tree(got, storage / best), f"{mode} download differs from storage"
    res = det(served, home, "e", "download", "1", "-o", str(tmp_path / "exp-dl"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert same_tree(tmp_path / "exp-dl" / best, storage / best)

    sdk_dir = tmp_path / "sdk"
    sdk_dir.mkdir()
    res = subprocess.run([f"{DET_VENV}/bin/python", "-c", SDK, served.url, str(sdk_dir)],
                         capture_output=True, text=True, timeout=120,
                         env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stdout + res.stderr
    sdk = json.loads(res.stdout.strip().splitlines()[-1])
    assert sdk["top"] == best and sdk["top_config_metric"] == "val_loss"
    assert sdk["top_val"] == 0.5 and sdk["listed"][0] == best
    assert set(sdk["listed"]) == {best, latest}  # COMPLETED only, best first
    assert sdk["trial_listed"] == sorted(uuids.values())
    assert sdk["validation"] == [[1, 1.5], [2, 0.5], [3, 1.5]]
    assert sdk["training"] == [1, 2, 3]
    for how in ("direct", "master"):
        assert same_tree(Path(sdk[how]), storage / best), how
        assert same_tree(Path(sdk[how]), tmp_path / "det-master"), how

    # dettui's own CLI: the same files, straight from storage or streamed by the master
    for mode in ("direct", "master"):
        got = tmp_path / f"dettui-{mode}"
        res = served.cli("checkpoint", "download", best, "-o", str(got), "--mode", mode)
        assert f"{best} -> {got}" in res.stdout
        assert same_tree(got, storage / best), mode
    top = served.cli("e", "download", "1", "--top", "2", "-o", str(tmp_path / "top")).stdout
    assert top.index(best) < top.index(latest), top  # best first
    # named as the dashboard names a download: exp-1-trial-1-step-3-<uuid8>
    assert same_tree(next((tmp_path / "top").glob(f"exp-1-trial-*-step-*-{latest[:8]}")),
                     storage / latest)
    mine = json.loads(served.cli("checkpoint", "list", "1", "--best", "1", "--json").stdout)
    assert [c["uuid"] for c in mine] == [best]

    # the trial linked itself to `best` (TRAIN): get_metrics finds its validation reports
    res = subprocess.run([f"{DET_VENV}/bin/python", "-c", SDK_CHANGES, served.url, best],
                         capture_output=True, text=True, timeout=120,
                         env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stdout + res.stderr
    changes = json.loads(res.stdout.strip().splitlines()[-1])
    assert changes["added"] == {"steps_completed": 2, "tag": "best", "nested": {"a": 1}}
    assert changes["removed"] == {"steps_completed": 2, "tag": "best"}
    assert changes["state"] == "STATE_PARTIALLY_DELETED"
    assert changes["resources"] == ["metadata.json", "sub/", "weights.bin"]
    assert not (storage / best / "sub" / "note.txt").exists()
    assert changes["metrics"] == [[1, 1, {"val_loss": 1.5}], [1, 2, {"val_loss": 0.5}],
                                  [1, 3, {"val_loss": 1.5}]]
    refreshed = det(served, home, "checkpoint", "rm", latest, "--yes")  # no glob: a refresh
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    assert served.api("GET", f"/api/v1/checkpoints/{latest}")["checkpoint"]["state"] == \
        "STATE_COMPLETED"
    removed = det(served, home, "checkpoint", "rm", latest, "--glob", "sub/**", "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert not (storage / latest / "sub").exists() and (storage / latest / "weights.bin").exists()

    deleted = det(served, home, "checkpoint", "delete", latest, "--yes")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert not (storage / latest).exists()
    state = served.api("GET", f"/api/v1/checkpoints/{latest}")["checkpoint"]["state"]
    assert state == "STATE_DELETED"
    gone = det(served, home, "checkpoint", "download", latest, "-o", str(tmp_path / "x"))
    assert gone.returncode != 0
