"""`e create --dry-run` planning: nodes like the scheduler places them, per-node torchrun."""

from __future__ import annotations

import json

from dettui.launch import dryrun
from dettui.launch.dryrun import AgentView

DDP = {"entrypoint": "python3 -m dettui.launch.torch_distributed --nproc_per_node=2 -- "
                     "python3 ddp.py", "resources": {"slots_per_trial": 2}}


def test_one_agent_with_the_slots_runs_one_node() -> None:
    nodes, note = dryrun.plan(DDP, [AgentView("small", 1), AgentView("big", 4)])
    assert note == "" and len(nodes) == 1
    node = nodes[0]
    assert node.agent == "big" and node.slot_ids == [0, 1]
    assert node.launcher is not None
    argv = list(node.launcher.argv)
    assert argv[argv.index("--nnodes") + 1] == "1"
    assert "--nproc_per_node=2" in argv, "overrides before -- are passed to torchrun"
    assert argv[-2:] == ["python3", "ddp.py"]


def test_whole_agents_make_one_node_each_with_the_chief_first() -> None:
    agents = [AgentView("a", 1, "10.0.0.1"), AgentView("b", 1, "10.0.0.2")]
    nodes, note = dryrun.plan(DDP, agents)
    assert note == "" and [n.agent for n in nodes] == ["a", "b"]
    for rank, node in enumerate(nodes):
        rdzv = json.loads(node.env["DETTUI_RENDEZVOUS"])
        assert rdzv["addresses"] == ["10.0.0.1", "10.0.0.2"] and rdzv["rank"] == rank
        argv = list(node.launcher.argv)  # type: ignore[union-attr]
        assert argv[argv.index("--node_rank") + 1] == str(rank)
        assert argv[argv.index("--master_addr") + 1] == "10.0.0.1"
    text = dryrun.render(nodes, note)
    assert "node 1: agent b, slots [0]" in text


def test_a_plan_that_cannot_fit_says_so() -> None:
    nodes, note = dryrun.plan({**DDP, "resources": {"slots_per_trial": 3}},
                              [AgentView("a", 2), AgentView("b", 2)])
    assert "3 slots do not fit" in note and len(nodes) == 2
    _, note = dryrun.plan(DDP, [])
    assert "no agent is connected" in note


def test_plain_scripts_have_no_launcher_line() -> None:
    nodes, _ = dryrun.plan({"entrypoint": "python3 train.py"}, [AgentView("a", 1)])
    assert nodes[0].launcher is None
    assert nodes[0].entrypoint == ["sh", "-c", "python3 train.py"]
