"""DistributedContext's per-node operations with 4 real ranks on 2 "nodes" (two torchrun
launchers on this machine with a static rendezvous, as dettui runs a trial across two agents):
allgather_local, gather_local and broadcast_local stay within a node, get_num_agents counts
nodes, and the trial-wide sequence still agrees afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.core.test_sharded import free_port

pytestmark = pytest.mark.slow

SCRIPT = """
import json, os
from dettui import core

dist = core.DistributedContext.from_torch_distributed()
node, local = dist.cross_rank, dist.local_rank
out = {
    "rank": dist.rank, "agents": dist.get_num_agents(),
    "allgather_local": dist.allgather_local(f"{node}.{local}"),
    "gather_local": dist.gather_local(dist.rank),
    "broadcast_local": dist.broadcast_local(f"from node {node}" if local == 0 else "mine"),
    "allgather": dist.allgather(dist.rank),
}
# a file per rank: two ranks of a node share torchrun's stdout, and their lines can interleave
with open(os.path.join(os.environ["RESULT_DIR"], f"{dist.rank}.json"), "w") as f:
    json.dump(out, f)
"""


def test_local_operations_stay_within_a_node(tmp_path: Path) -> None:
    (tmp_path / "local.py").write_text(textwrap.dedent(SCRIPT))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "DET_CHIEF_IP": "127.0.0.1", "RESULT_DIR": str(tmp_path)}
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank",
         str(node), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
         str(port), str(tmp_path / "local.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for node in (0, 1)]
    outputs = [p.communicate(timeout=120) for p in nodes]
    for p, (_, err) in zip(nodes, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    results = {r["rank"]: r for r in (json.loads((tmp_path / f"{rank}.json").read_text())
                                      for rank in range(4))}
    assert sorted(results) == [0, 1, 2, 3]
    for rank, r in results.items():
        node, local = divmod(rank, 2)
        assert r["agents"] == 2
        assert r["allgather_local"] == [f"{node}.0", f"{node}.1"], r
        assert r["gather_local"] == ([2 * node, 2 * node + 1] if local == 0 else None), r
        assert r["broadcast_local"] == f"from node {node}", r
        assert r["allgather"] == [0, 1, 2, 3], r
