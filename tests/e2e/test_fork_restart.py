"""A change on disk to what the fork server imported restarts it before the next trial: the
trial after the change is forked by a new server (its start line names another pid), and the
old one ends once its trials have."""

from __future__ import annotations

import re
from pathlib import Path

import psutil

from dettui.launch import alias
from tests.conftest import Served
from tests.e2e.test_single import write_ctx
from tests.poll import until

CONFIG = """
    name: {name}
    entrypoint: python3 trial.py
    searcher: {{name: single, metric: x, max_length: 1}}
    max_restarts: 0
    """
TRIAL = """
    from dettui import core
    with core.init() as ctx:
        ctx.train.report_validation_metrics(steps_completed=1, metrics={"x": 1.0})
    """
STARTED = re.compile(r"trial (\d+) allocation \S+ started: .*forked by fork server (\d+) in")


def _run(served: Served, tmp_path: Path, name: str, exp_id: int) -> int:
    """Run one experiment; the pid of the fork server that forked its trial."""
    (tmp_path / name).mkdir()
    cfg, ctx = write_ctx(tmp_path / name, CONFIG.format(name=name), {"trial.py": TRIAL})
    served.cli("e", "create", str(cfg), str(ctx))
    assert served.wait_experiment(exp_id)["state"] == "STATE_COMPLETED"
    assert served.log_path is not None
    log = served.log_path.read_text()
    trial = served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]["id"]
    pids = [int(m[2]) for m in STARTED.finditer(log) if int(m[1]) == trial]
    assert pids, f"trial {trial} was not forked:\n{log[-3000:]}"
    return pids[-1]


def test_a_changed_module_restarts_the_fork_server(tmp_path: Path) -> None:
    served = Served(tmp_path / "state", tmp_path / "config",
                    extra=["--agent-slots", "1", "--trial-start", "fork"])
    served.start()
    try:
        first = _run(served, tmp_path, "before", 1)
        # the same bytes written again: a change as inotify sees it (the module stays as is)
        module = Path(alias.__file__)
        module.write_bytes(module.read_bytes())
        second = _run(served, tmp_path, "after", 2)
        assert second != first, "the trial after the change was forked by the old server"
        until(lambda: not psutil.pid_exists(first) or psutil.Process(first).status()
              == psutil.STATUS_ZOMBIE, "the old server to end", timeout=30)
    finally:
        served.stop()
