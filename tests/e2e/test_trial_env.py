"""What a trial runs in: startup-hook.sh sourced before the entrypoint (its exports reach it,
its output is in the trial's logs), and an experiment kill ends every process of the trial,
however it double-forked (its PID namespace, or the process-group fallback)."""

from __future__ import annotations

import shutil

import pytest

from dettui.agent import sandbox
from tests.conftest import Served
from tests.e2e.test_sandbox import SLEEPER, allocation_processes
from tests.e2e.test_single import write_ctx
from tests.poll import until

pytestmark = pytest.mark.slow


def test_the_startup_hook_is_sourced_before_the_entrypoint(served: Served, tmp_path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: hooked
        entrypoint: python3 -c 'import os; print("entrypoint sees", os.environ["FROM_HOOK"])'
        searcher: {name: single, metric: x, max_length: 1}
        max_restarts: 0
        """, {"startup-hook.sh": """
        echo "hook runs in $(pwd) for trial $DET_TRIAL_ID"
        export FROM_HOOK="set-by-the-hook"
        """})
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120).stdout
    assert "ended: COMPLETED" in out, out
    assert "hook runs in " in out and "for trial 1" in out, out
    assert "entrypoint sees set-by-the-hook" in out, out
    assert out.index("hook runs in") < out.index("entrypoint sees"), out


def test_the_startup_hook_is_sourced_by_bash_as_in_determined(served: Served,
                                                              tmp_path) -> None:
    """Determined's entrypoint.sh is a bash script: hooks may use `[[ ]]`, arrays, `source`
    and pipefail (sh, dash here, fails on the first of them)."""
    cfg, ctx = write_ctx(tmp_path, """
        name: bash-hook
        entrypoint: python3 -c 'import os; print("entrypoint sees", os.environ["FROM_HOOK"])'
        searcher: {name: single, metric: x, max_length: 1}
        max_restarts: 0
        """, {"startup-hook.sh": """
        set -o pipefail
        parts=(alpha beta gamma)
        if [[ ${#parts[@]} -eq 3 && $DET_TRIAL_ID == 1 ]]; then
          source ./more-env.sh
          export FROM_HOOK="${parts[1]}-$MORE"
        fi
        """, "more-env.sh": "MORE=sourced\n"})
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120,
                     check=False).stdout
    assert "ended: COMPLETED" in out, out
    assert "entrypoint sees beta-sourced" in out, out


def test_without_bash_the_hook_is_sourced_by_sh(tmp_path, monkeypatch) -> None:
    from dettui.agent.allocation import hook_shell

    assert hook_shell() == shutil.which("bash")
    (tmp_path / "sh").symlink_to(shutil.which("sh") or "/bin/sh")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hook_shell() == "sh"


def test_a_failing_startup_hook_fails_the_trial(served: Served, tmp_path) -> None:
    cfg, ctx = write_ctx(tmp_path, """
        name: bad-hook
        entrypoint: python3 -c 'print("entrypoint ran")'
        searcher: {name: single, metric: x, max_length: 1}
        max_restarts: 0
        """, {"startup-hook.sh": "echo about to fail\nfalse\necho not reached\n"})
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120,
                     check=False).stdout
    assert "ended: ERROR" in out and "about to fail" in out, out
    assert "entrypoint ran" not in out and "not reached" not in out, out


@pytest.mark.both_ways  # forked and fresh (conftest)
@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_killing_the_experiment_leaves_no_process(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                  namespaces: bool) -> None:
    if namespaces and not sandbox.probe().on:
        pytest.skip(sandbox.probe().note or "no namespaces")
    if not namespaces:
        monkeypatch.setenv(sandbox.OFF_SWITCH, "1")
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "1"])
    s.start()
    try:
        cfg, ctx = write_ctx(tmp_path, """
            name: daemon
            entrypoint: python3 sleeper.py
            searcher: {name: single, metric: x, max_length: 1}
            """, {"sleeper.py": SLEEPER})
        s.cli("e", "create", str(cfg), str(ctx))
        until(lambda: allocation_processes(daemons=True), "the trial's daemon", timeout=60)
        s.cli("e", "kill", "1")
        until(lambda: not allocation_processes(), "no process left", timeout=30)
        assert s.wait_experiment(1, timeout=60)["state"] == "STATE_CANCELED"
    finally:
        s.stop()
