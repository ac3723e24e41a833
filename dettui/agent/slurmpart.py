"""One node's part of a Slurm job (`python -m dettui.agent.slurmpart`, run by the batch script
through `srun` on every node): a one-shot agent for one allocation. It fetches the allocation's
start message with the allocation's token, takes its node's slots and the rendezvous from
Slurm's environment (SLURM_NODEID, SLURM_JOB_NODELIST), and runs it exactly as an agent does
(`AllocationRun`: the context, the allow-listed environment, the launcher, the sandbox, log
shipping). SIGTERM (scancel) ends the trial's process tree. Its exit code is the job's."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from dettui import retry
from dettui.agent import process
from dettui.agent.allocation import AllocationRun
from dettui.auth import token_path
from dettui.client import Client
from dettui.errors import DettuiError
from dettui.launch.spec import Topology
from dettui.protocol import StartWork

log = logging.getLogger("dettui.agent.slurm")
PATIENCE = 120.0  # seconds to wait for a master that is away (restarting)
PORT_BASE = 20000  # a multi-node job's rendezvous port: PORT_BASE + job id % 10000


def for_node(start: StartWork, node: int, addresses: list[str], slots_per_node: int,
             port: int) -> StartWork:
    """This node's part of a start message made for the whole allocation: its slots (the
    allocation's slots in chunks of `slots_per_node`, node 0 first) and, across nodes, the
    rendezvous (chief first)."""
    chunks = [start.slots[i:i + slots_per_node]
              for i in range(0, len(start.slots), slots_per_node)] or [start.slots]
    nodes = min(len(chunks), max(1, len(addresses)))
    mine = chunks[min(node, len(chunks) - 1)]
    env = dict(start.env)
    env["DET_SLOT_IDS"] = json.dumps(mine)
    env["DET_AGENT_ID"] = start.env.get("DET_AGENT_ID", "slurm")
    if "OMP_NUM_THREADS" in start.env:
        env["OMP_NUM_THREADS"] = str(max(1, len(mine)))
    if nodes > 1:
        env.update(Topology(tuple(addresses[:nodes]), node,
                            tuple(len(c) for c in chunks[:nodes]), port).to_env())
    return start.model_copy(update={"slots": mine, "node_rank": node, "env": env})


def node_addresses(env: Mapping[str, str]) -> list[str]:
    """The job's nodes, as addresses (NodeAddr) where Slurm knows them, in node id order."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    if not nodelist:
        return ["127.0.0.1"]
    names = _scontrol("show", "hostnames", nodelist).split()
    addr = {}
    for line in _scontrol("show", "node", "-o").splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "NodeName" in fields:
            addr[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return [addr.get(n, n) for n in names] or ["127.0.0.1"]


def _scontrol(*args: str) -> str:
    res = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60,
                         check=False)
    return res.stdout if res.returncode == 0 else ""


async def fetch_start(client: Client, alloc_id: str) -> StartWork:
    waits = retry.delays(give_up_after=PATIENCE)
    while True:
        try:
            return await client.slurm_start(alloc_id)
        except DettuiError as exc:
            wait = next(waits, None)
            if wait is None or exc.http_status in (401, 403, 404):
                raise
            await asyncio.sleep(wait)


async def run_part(env: Mapping[str, str]) -> int:
    master = env["DETTUI_SLURM_MASTER"]
    alloc_id = env["DETTUI_SLURM_ALLOCATION"]
    node = int(env.get("SLURM_NODEID") or 0)
    client = Client(master, task_token=env["DETTUI_SLURM_TOKEN"])
    try:
        start = await fetch_start(client, alloc_id)
        addresses = await asyncio.to_thread(node_addresses, env)
        port = PORT_BASE + int(env.get("SLURM_JOB_ID") or 0) % 10000
        start = for_node(start, node, addresses, int(env["DETTUI_SLURM_SLOTS_PER_NODE"]), port)
        work_root = Path(env["DETTUI_SLURM_WORK"]) / f"node{node}-{os.uname().nodename}"
        run = AllocationRun(start, client, start.env["DET_AGENT_ID"], work_root, master,
                            set(), (token_path().parent,))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(
                run.kill("the Slurm job was cancelled")))
        code, reason = await run.run()
    finally:
        await client.close()
    log.info("allocation %s node %d exited: %s %s", alloc_id, node, code, reason)
    if code is not None:
        return code
    return 0 if not reason else 1


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    process.become_subreaper()
    sys.exit(asyncio.run(run_part(os.environ)))


if __name__ == "__main__":
    main()
