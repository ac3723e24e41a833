"""Issue 32: the `det` 0.38.1 commands that answered a bare "no such route" answer for real
(or with Determined's not-supported shape and a reason), and the SDK's labels work. One
master for the whole file: one experiment, then every command against it."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import SAMPLE, Served

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the "
                                 "determined venv)")]
RANGE = ("2000-01-01T00:00:00Z", "2099-01-01T00:00:00Z")


def _ok(res: subprocess.CompletedProcess[str]) -> str:
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "no such route" not in out and "Traceback" not in out, out
    return res.stdout


@pytest.mark.expect_404(r"POST /api/v1/job-queues")  # an ended experiment's job is gone
@pytest.mark.expect_404(r"GET /api/v1/tasks/0a1b2c3d-0000-4000-8000-000000000000")  # no task
def test_every_command_answers(served: Served, tmp_path: Path) -> None:
    user, admin = tmp_path / "user", tmp_path / "admin"
    for home, name in ((user, "determined"), (admin, "admin")):
        home.mkdir()
        assert det(served, home, "user", "login", name, stdin="\n").returncode == 0
    _ok(det(served, user, "e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE)))
    served.wait_experiment(1, timeout=300)

    assert "0.38.1" in _ok(det(served, user, "agent", "list"))  # the version, as Determined
    job = served.api("GET", "/api/v1/experiments/1")["experiment"]["jobId"]
    ended = det(served, user, "job", "update", job, "--priority", "3")
    assert ended.returncode != 0 and f"job {job} not found" in ended.stderr, ended.stderr
    templates = _ok(det(served, user, "template", "list"))
    assert "workspaces" not in templates and "Name" in templates, templates

    conf = _ok(det(served, admin, "master", "config"))
    assert "cluster_name: dettui" in conf and "resource_pools:" in conf, conf
    refused = det(served, user, "master", "config")  # admins only, as Determined
    assert refused.returncode != 0 and "no such route" not in refused.stderr
    assert "[INFO]" in _ok(det(served, user, "master", "logs", "--tail", "5"))
    assert "clusterMessage: null" in _ok(det(served, admin, "master", "cluster-message", "get"))

    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir()
    out = _ok(det(served, user, "trial", "support-bundle", "1", "-o", str(bundle_dir)))
    assert "bundle path:" in out, out
    (bundle,) = bundle_dir.glob("*.tar.gz")
    with tarfile.open(bundle) as tar:
        assert any(n.endswith("master_logs.txt") for n in tar.getnames())

    preview = _ok(det(served, user, "preview-search", str(SAMPLE / "search.yaml")))
    assert "Trials" in preview and "Training Time" in preview, preview

    cluster_id = served.api("GET", "/api/v1/master")["clusterId"]
    events = served.state_dir / "checkpoints" / cluster_id / "tensorboard" / "experiment"
    (events / "1" / "trial" / "1").mkdir(parents=True, exist_ok=True)
    (events / "1" / "trial" / "1" / "events.out.tfevents.1").write_bytes(b"x")
    _ok(det(served, user, "e", "delete-tb-files", "1"))
    assert not (events / "1").exists()

    _ok(det(served, user, "e", "set", "log-retention", "1", "--forever"))
    for what, ident in (("e", "1"), ("trial", "1")):
        days = det(served, user, what, "set", "log-retention", ident, "--days", "5")
        assert days.returncode != 0 and "kept until its experiment is deleted" in days.stderr, \
            days.stderr

    csv = _ok(det(served, user, "resources", "allocations", *RANGE)).splitlines()
    assert csv[0].startswith("allocation_id,task_type,username") and len(csv) >= 2, csv
    agg = _ok(det(served, user, "resources", "aggregated", "2000-01-01", "2099-01-01"))
    assert "total,total," in agg, agg

    assert "default" in _ok(det(served, user, "rp", "bindings", "list-workspaces", "default"))
    assert "{}" in _ok(det(served, user, "config-policies", "describe", "experiment"))
    _tasks(served, user, admin, tmp_path)
    _labels(served, user)


def _refused(res: subprocess.CompletedProcess[str], said: str) -> None:
    assert res.returncode != 0 and said in res.stderr, res.stdout + res.stderr
    assert "no such route" not in res.stderr and "Traceback" not in res.stderr, res.stderr


def _tasks(served: Served, user: Path, admin: Path, tmp_path: Path) -> None:
    """`det task config|kill|pause|cleanup-logs`, `det notebook open`, and the config-policy
    and pool-binding changes: real answers or a one-line refusal."""
    task = served.api("GET", "/api/v1/experiments/1/trials")["trials"][0]["taskId"]
    assert "searcher:" in _ok(det(served, user, "task", "config", task))
    _refused(det(served, user, "task", "kill", task), "as it is in state 'COMPLETED'")
    _refused(det(served, user, "task", "pause", task), "det experiment pause 1")
    _refused(det(served, user, "notebook", "open", "0a1b2c3d-0000-4000-8000-000000000000"),
             "notebooks, shells, commands and TensorBoards are not supported")
    assert "Deleted 0 rows" in _ok(det(served, admin, "task", "cleanup-logs"))
    policy = tmp_path / "policy.yaml"
    policy.write_text("invariant_config:\n  description: set by a config policy\n")
    _refused(det(served, admin, "config-policies", "set", "experiment", str(policy)),
             "config policies are not supported by dettui")
    _ok(det(served, admin, "config-policies", "delete", "experiment"))
    _refused(det(served, admin, "rp", "bindings", "add", "default", "Uncategorized"),
             "binding resource pools to workspaces is not supported")


def _labels(served: Served, home: Path) -> None:
    """`Experiment.add_label/remove_label` and `det e label add|remove`: the labels show in
    the experiment's JSON."""
    _ok(det(served, home, "e", "label", "add", "1", "cli"))
    script = ("from determined.experimental import client\n"
              f"client.login({served.url!r}, 'determined', '')\n"
              "e = client.get_experiment(1)\n"
              "e.add_label('sdk'); e.add_label('gone'); e.remove_label('gone')\n"
              "print(sorted(e.labels))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DETTUI_"))}
    env["HOME"] = str(home)
    res = subprocess.run([str(Path(str(DET_VENV)) / "bin" / "python"), "-c", script],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "['cli', 'sdk']" in res.stdout, res.stdout + res.stderr
    _ok(det(served, home, "e", "label", "remove", "1", "cli"))
    assert served.api("GET", "/api/v1/experiments/1")["experiment"]["labels"] == ["sdk"]
