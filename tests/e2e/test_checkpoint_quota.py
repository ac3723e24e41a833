"""End to end: a trial that checkpoints past the master's checkpoint storage quota (issue 29,
build item 5) ends its experiment in ERROR, with the quota's message in `dettui t logs` (the
Core API's traceback and the master's line), no restart, the refused checkpoint's files gone;
`dettui e describe` and `e list` show the usage (what the experiment's GC kept), and
`dettui checkpoint delete` frees it."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from dettui import byte_size
from tests.conftest import Served
from tests.poll import until

pytestmark = pytest.mark.slow

TRAIN = """
from dettui import core

with core.init() as ctx:
    for step in range(1, 6):
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            print(f"writing {uuid}", flush=True)
            (path / "weights.bin").write_bytes(bytes(40 * 1024))
        print(f"kept {uuid}", flush=True)
"""
CONFIG = """
name: over-quota
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 5}}
max_restarts: 3
"""


@pytest.fixture
def quota_served(tmp_path: Path) -> Iterator[Served]:
    master = tmp_path / "master.yaml"
    master.write_text("checkpoint_storage_quota: 100KiB\n")
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--config", str(master)])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_trial_over_quota_ends_in_error_with_the_message(quota_served: Served,
                                                          tmp_path: Path) -> None:
    served = quota_served
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text(textwrap.dedent(TRAIN))
    (tmp_path / "exp.yaml").write_text(textwrap.dedent(CONFIG))
    served.cli("e", "create", str(tmp_path / "exp.yaml"), str(ctx))
    exp = served.wait_experiment(1, timeout=30)
    assert exp["state"] == "STATE_ERROR"
    logs = served.cli("t", "logs", "1").stdout
    assert logs.count("kept ") == 2, logs
    quota = "over its quota of 100.0 KiB (checkpoint_storage_quota in the master config)"
    assert logs.count(quota) >= 2, logs  # the master's line and the Core API's traceback
    assert "QuotaExceeded" in logs and "dettui checkpoint delete" in logs
    assert "Experiment 1 stops in ERROR" in logs
    trial = served.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["state"] == "STATE_ERROR" and trial["restarts"] == 0
    refused = logs.split("writing ")[3].split()[0]
    kept = [line.split()[-1] for line in logs.splitlines() if "kept " in line]
    assert refused not in kept
    # The experiment's GC (save_trial_latest: 1) has run since: what it keeps is on disk, the
    # refused checkpoint's files are not (the Core API removed them).
    ckpts = served.api("GET", "/api/v1/experiments/1/checkpoints")["checkpoints"]
    held = sorted(c["uuid"] for c in ckpts if c["state"] == "STATE_COMPLETED")
    assert held and set(held) <= set(kept)
    storage = served.state_dir / "checkpoints"
    # The GC marks checkpoints deleted in its transaction and removes their files after it.
    # (besides the cluster's TensorBoard directory, <storage>/<cluster>/tensorboard)
    until(lambda: sorted(p.name for p in storage.iterdir()
                         if not (p / "tensorboard").is_dir()) == held,
          lambda: f"only the held checkpoints on disk: {sorted(storage.iterdir())} vs {held}")
    size = int(json.loads(served.cli("e", "describe", "1", "--json").stdout)["experiment"][
        "checkpointSize"])
    assert size == sum(p.stat().st_size for uuid in held for p in (storage / uuid).iterdir())
    shown = f"{byte_size.human(size)} ({len(held)})"
    described = served.cli("e", "describe", "1").stdout
    assert "Checkpoints" in described and shown in described, described
    assert shown in served.cli("e", "list").stdout
    served.cli("checkpoint", "delete", *held, "--yes")
    assert "0 B (0)" in served.cli("e", "describe", "1").stdout
    assert [p for p in storage.iterdir() if not (p / "tensorboard").is_dir()] == []
