"""`dettui e create --dry-run`: what each node would run, without running anything.

Plans the trial's nodes the way the scheduler does (one agent if it has the slots, else whole
agents of equal size), then expands the entrypoint like the agent and, for the torch_distributed
launcher, like the launcher itself: the exact torchrun command and environment per node.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dettui.launch import forkable, sitedir, spec

LAUNCHERS = {"dettui.launch.torch_distributed", "determined.launch.torch_distributed"}


@dataclass(frozen=True)
class AgentView:
    id: str
    slots: int
    address: str = "127.0.0.1"


@dataclass(frozen=True)
class NodePlan:
    node_rank: int
    agent: str
    slot_ids: list[int]
    entrypoint: list[str]
    env: dict[str, str]
    launcher: spec.Command | None
    start: str = ""  # forked by the agent's fork server, or fresh and why (start_way)


# What an agent's fork server has imported besides the standard library (forkable.PRELOAD)
PRELOADED = {"torch", "numpy", "dettui", "determined", "typing_extensions"}


def start_way(config: dict[str, Any], files: Sequence[str]) -> str:
    """How an agent would start the trial: forked from its fork server, or a fresh
    interpreter and why (as far as the config and the context's files tell; the agent's
    Python and what it preloaded decide the rest, and its start line says)."""
    import sys

    environment = config.get("environment") or {}
    if environment.get("fork_server") is False:
        return "fresh: environment.fork_server is false"
    if spec.STARTUP_HOOK in files:
        return f"fresh: {spec.STARTUP_HOOK} runs first"
    argv = spec.entrypoint_argv(config.get("entrypoint") or "")
    words, why = forkable.entry_words(argv)
    if words is None:
        return f"fresh: {why}"
    if spec.PYTHON_NAME.fullmatch(words[0].rsplit("/", 1)[-1]) is None:
        return f"fresh: the entrypoint runs {words[0]}, not Python"
    rest = [w for w in words[1:] if w != "-u"]
    if not rest or rest[0].startswith("-") and rest[0] != "-m":
        return f"fresh: python runs with the option {rest[0] if rest else '(none)'}"
    if rest[0] != "-m" and rest[0] not in files:
        return f"fresh: {rest[0]} is not a file of the context"
    env = _variables(environment.get("environment_variables"))
    why = forkable.env_reason(env, {"LD_LIBRARY_PATH": env.get("LD_LIBRARY_PATH", "")})
    if why is not None:
        return f"fresh: {why}"
    where = "" if rest[0] == "-m" else posixpath.dirname(rest[0])
    names = {posixpath.relpath(f, where or ".").split("/", 1)[0] for f in files
             if not where or f.startswith(where + "/")}
    preloaded = (set(sys.stdlib_module_names) | PRELOADED) - forkable.fresh_start_modules(
        sitedir.DIRECTORY)
    for name in sorted(names):
        stem = name.split(".", 1)[0]
        if stem in preloaded and (name.endswith((".py", ".so", ".pyc"))
                                  or f"{posixpath.join(where, name)}/__init__.py" in files):
            return f"fresh: the context's {name} would be imported instead of {stem}"
    note = " (if the agent's python3 is its fork server's)" if "PATH" in env or \
        words[0].startswith("/") else ""
    shell = " (no shell runs this simple line)" if len(argv) == 3 and argv[:2] == ["sh", "-c"] \
        else ""
    return (f"forked by the agent's fork server{note}{shell}, unless the agent runs with "
            "--trial-start fresh")


def _variables(value: Any) -> dict[str, str]:
    items = value if isinstance(value, list) else [
        i for v in (value or {}).values() for i in (v or [])] if isinstance(value, dict) else []
    return dict(str(i).partition("=")[::2] for i in items if "=" in str(i))


def place(slots: int, agents: Sequence[AgentView]) -> tuple[list[tuple[AgentView, int]], str]:
    """(agent, slots) per node, and a note when the plan had to assume something."""
    if slots <= 0:
        return [(agents[0] if agents else AgentView("(any agent)", 0), 0)], ""
    ranked = sorted(agents, key=lambda a: (-a.slots, a.id))
    for agent in ranked:
        if agent.slots >= slots:
            return [(agent, slots)], ""
    if not agents:
        return [(AgentView("(no agent connected)", slots), slots)], \
            "no agent is connected: assuming one node with every slot"
    size = ranked[0].slots
    same = [a for a in ranked if a.slots == size]
    if size and slots % size == 0 and len(same) >= slots // size:
        return [(a, size) for a in same[:slots // size]], ""
    return [(AgentView(f"(node {i})", size or slots), size or slots)
            for i in range(max(1, -(-slots // max(size, 1))))], \
        (f"{slots} slots do not fit the connected agents (largest: {size} slots): the trial "
         "would wait; shown as if whole agents of that size existed")


def _launcher_args(argv: list[str]) -> list[str] | None:
    """The arguments given to our torch_distributed launcher, if the entrypoint runs it."""
    tokens = shlex.split(argv[2]) if argv[:2] == ["sh", "-c"] else argv
    for i in range(len(tokens) - 1):
        if tokens[i] == "-m" and tokens[i + 1] in LAUNCHERS:
            return tokens[i + 2:]
    return None


def plan(config: dict[str, Any], agents: Sequence[AgentView],
         hparams: dict[str, Any] | None = None, files: Sequence[str] = ()
         ) -> tuple[list[NodePlan], str]:
    from dettui.launch import torch_distributed

    slots = int((config.get("resources") or {}).get("slots_per_trial", 1))
    placed, note = place(slots, agents)
    argv = spec.entrypoint_argv(config.get("entrypoint") or "")
    nodes = []
    for rank, (agent, n) in enumerate(placed):
        env = {"DET_AGENT_ID": agent.id, "DET_SLOT_IDS": json.dumps(list(range(n))),
               "DET_HPARAMS": json.dumps(hparams or {}), "DET_TRIAL_RUN_ID": "1"}
        if len(placed) > 1:
            env.update(spec.Topology(tuple(a.address for a, _ in placed), rank,
                                     tuple(k for _, k in placed), spec.C10D_PORT).to_env())
        else:
            env["DETTUI_C10D_PORT"] = str(spec.C10D_PORT)
        launcher = None
        args = _launcher_args(argv)
        if args is not None:
            launcher = torch_distributed.build(args, env)
        nodes.append(NodePlan(rank, agent.id, list(range(n)), argv, env, launcher,
                              start_way(config, files)))
    return nodes, note


def render(nodes: list[NodePlan], note: str) -> str:
    lines = []
    if note:
        lines.append(f"note: {note}")
    for node in nodes:
        lines.append(f"node {node.node_rank}: agent {node.agent}, slots {node.slot_ids}")
        lines.append(f"  entrypoint: {shlex.join(node.entrypoint)}")
        if node.start:
            lines.append(f"  start: {node.start}")
        lines.append("  environment (besides DET_MASTER, DET_SESSION_TOKEN, "
                     "DET_EXPERIMENT_CONFIG, DET_TRIAL_ID...):")
        lines += [f"    {k}={v}" for k, v in sorted(node.env.items())]
        if node.launcher is not None:
            lines.append("  the launcher runs (port chosen at start; 29400 shown):")
            lines.append(f"    {node.launcher.render()}")
    return "\n".join(lines)
