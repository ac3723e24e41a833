"""Who decides whether a trial is forked from the fork server: the agent (`--trial-start
fresh`), the resource pool (`fork_server: false` in the master config) and the experiment
(`environment.fork_server: false`); each says so in the trial's start line, which `dettui t
describe` shows, and the dry run says it before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.poll import until

CONFIG = """
    name: choice
    entrypoint: python3 trial.py
    searcher: {{name: single, metric: x, max_length: 1}}
    max_restarts: 0
    {extra}
    """
TRIAL = """
    from dettui import core
    with core.init() as ctx:
        ctx.train.report_validation_metrics(steps_completed=1, metrics={"x": 1.0})
    """


def _started(s: Served, tmp_path: Path, extra: str = "") -> str:
    cfg, ctx = write_ctx(tmp_path, CONFIG.format(extra=extra), {"trial.py": TRIAL})
    dry = s.cli("e", "create", str(cfg), str(ctx), "--dry-run").stdout
    s.cli("e", "create", str(cfg), str(ctx))
    assert s.wait_experiment(1)["state"] == "STATE_COMPLETED"
    described = until(lambda: s.cli("t", "describe", "1").stdout, "the start line",
                      timeout=30, done=lambda out: "Started: " in out)
    started = described.split("Started: ", 1)[1].splitlines()[0]
    return f"{started}\n--- dry run:\n{dry}"


def _serve(tmp_path: Path, *extra: str) -> Served:
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "1", *extra])
    s.start()
    return s


def test_a_trial_is_forked_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DETTUI_TRIAL_START", raising=False)  # the default, whatever the run's
    s = _serve(tmp_path)
    try:
        out = _started(s, tmp_path)
    finally:
        s.stop()
    assert out.startswith("forked by fork server "), out
    assert "start: forked by the agent's fork server" in out


@pytest.mark.parametrize("how", ["agent", "pool", "experiment"])
def test_each_level_can_start_trials_fresh(tmp_path: Path, how: str) -> None:
    extra: list[str] = []
    if how == "agent":
        extra = ["--trial-start", "fresh"]
    elif how == "pool":
        (tmp_path / "master.yaml").write_text(
            "resource_pools:\n  - pool_name: default\n    fork_server: false\n")
        extra = ["--config", str(tmp_path / "master.yaml")]
    s = _serve(tmp_path, *extra)
    try:
        out = _started(s, tmp_path, "environment: {fork_server: false}"
                       if how == "experiment" else "")
    finally:
        s.stop()
    want = {"agent": "fresh: the fork server is off for this agent",
            "pool": "fresh: resource pool default has fork_server: false",
            "experiment": "fresh: environment.fork_server is false"}[how]
    assert out.startswith(want), out
    if how == "experiment":
        assert "start: fresh: environment.fork_server is false" in out
