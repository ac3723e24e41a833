"""What the real determined==0.38.1 launchers ask of the master beyond torch_distributed: the
non-chief node of `determined.launch.deepspeed` and `horovod` marks itself a daemon
(`POST /api/v1/allocations/{id}/resources/{rid}/daemon`) and runs its sshd until the master
ends it, once the chief's launcher has exited. DeepSpeed, Horovod and sshd are not installed
here, so the trial makes that same call with the real package and then waits as sshd would.
The context's startup-hook.sh runs on both nodes first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV
from tests.conftest import Served
from tests.e2e.test_distributed import two_agents  # noqa: F401 - a fixture
from tests.e2e.test_single import write_ctx

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

NODE_SCRIPT = """
import os, time
import determined as det
from determined.common.api import authentication, certs

info = det.get_cluster_info()
print("node", info.container_rank, "of", len(info.container_addrs), os.environ["HOOKED"],
      flush=True)
if info.container_rank > 0:
    # determined/launch/deepspeed.py and horovod.py on a non-chief node, word for word
    cert = certs.default_load(info.master_url)
    sess = authentication.login_from_task(info.master_url, cert=cert)
    resources_id = os.environ.get("DET_RESOURCES_ID")
    sess.post(f"/api/v1/allocations/{info.allocation_id}/resources/{resources_id}/daemon")
    print("marked as a daemon; serving like sshd", flush=True)
    time.sleep(900)
else:
    time.sleep(5)
    print("the chief's launcher is done", flush=True)
"""


def test_a_non_chief_node_marked_daemon_is_ended_when_the_chief_is_done(
        two_agents: Served, tmp_path: Path) -> None:  # noqa: F811
    served = two_agents
    cfg, ctx = write_ctx(tmp_path, f"""
        name: daemon-node
        entrypoint: {DET_VENV}/bin/python node.py
        resources: {{slots_per_trial: 2}}
        searcher: {{name: single, metric: x}}
        max_restarts: 0
        """, {"node.py": NODE_SCRIPT,
              "startup-hook.sh": 'export HOOKED="hooked on $DET_AGENT_ID"\n'})
    out = served.cli("e", "create", str(cfg), str(ctx)).stdout
    exp_id = int(out.split("Created experiment ")[1].split()[0])
    exp = served.wait_experiment(exp_id, timeout=150)
    logs = served.cli("t", "logs", "1").stdout
    assert exp["state"] == "STATE_COMPLETED", logs
    assert "node 1 of 2" in logs and "marked as a daemon" in logs, logs
    # startup-hook.sh ran on every node before the entrypoint
    hooked = re.findall(r"node (\d) of 2 hooked on (node-[ab])", logs)
    assert sorted(rank for rank, _ in hooked) == ["0", "1"], logs
    assert {agent for _, agent in hooked} == {"node-a", "node-b"}, logs
    assert "the chief's launcher is done" in logs, logs
    trial = served.api("GET", "/api/v1/trials/1")["trial"]
    assert trial["restarts"] == 0 and len(trial["allocationIds"]) == 1, trial
