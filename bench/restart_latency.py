"""Restart latency: a torch trial preempted (its experiment paused: it sees the preemption
through `core.preempt`, checkpoints and exits) and resumed (activated), to the new run's first
line, with the trial forked from the agent's fork server and started fresh, side by side.

    .venv/bin/python bench/restart_latency.py [--restarts 10] [--ways fork,fresh]

Two real `dettui serve` run at once, one `--trial-start fork` and one `--trial-start fresh`,
each with one experiment of one trial (`import torch`, `core.init()`, then steps of 10 ms
until `should_preempt()`, a checkpoint with torch.save, exit; a resumed run loads it). Its first
run is the warm-up (the fork server imports torch then). The trial prints, with `time.time()`:
`first` as its first statement (before `import torch`), `ready` once torch is imported and
`core.init()` has returned, and `last` as its last statement. Restarts alternate between the
two serves, and between two kinds:

- idle: pause, wait until the trial is PAUSED (its run has exited), activate; timed from the
  activate call returning to the new run's `first` and `ready` stamps.
- at once: pause, and activate as soon as the run has printed its checkpoint's line (the
  master restarts the trial when its run ends); timed from the old run's `last` stamp (its
  last line, just before the process exits) to the new run's `first` and `ready` stamps.

Every restart's start line (forked by the fork server, or fresh and why) is read from the
trial's log. Medians (min-max) of `--restarts` of each kind for each way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serve import (  # noqa: E402
    WAYS,
    Serve,
    fork_ms,
    load,
    log_lines,
    ms,
    ready,
    servers,
    stages,
    start_way,
    text,
)

from dettui import context  # noqa: E402
from dettui.client import Client  # noqa: E402

TRIAL = """
import time
print(f"first {time.time():.6f}", flush=True)

import torch

from dettui import core

with core.init() as ctx:
    step = 0
    if ctx.info.latest_checkpoint:
        with ctx.checkpoint.restore_path(ctx.info.latest_checkpoint) as path:
            step = int(torch.load(path / "state.pt")["step"])
    print(f"ready {time.time():.6f} from step {step}", flush=True)
    while not ctx.preempt.should_preempt():
        step += 1
        time.sleep(0.01)
    with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
        torch.save({"step": step}, path / "state.pt")
    print(f"checkpointed {time.time():.6f} at step {step}", flush=True)
print(f"last {time.time():.6f}", flush=True)
"""
CONFIG = """
name: restart-probe
entrypoint: python3 trial.py
searcher: {name: single, metric: loss, max_length: 1000000}
max_restarts: 0
"""
ENDED = ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED")


class Probe:
    """One serve's experiment: its trial's log read from a cursor, stamps found by prefix."""

    def __init__(self, way: str, c: Client) -> None:
        self.way, self.c = way, c
        self.exp_id = self.trial_id = 0
        self.after = 0  # log line id read up to
        self.seen: list[dict[str, Any]] = []  # lines since the last restart

    async def start(self, files: list[dict[str, Any]]) -> None:
        await ready(self.c)
        body = await self.c.create_experiment(CONFIG, files)
        self.exp_id = int(body["experiment"]["id"])
        while not (trials := await self.c.trials(self.exp_id)):
            await asyncio.sleep(0.01)
        self.trial_id = int(trials[0]["id"])

    async def stamp(self, word: str, timeout: float = 120.0) -> float:
        """The next `word <time>` line's time, reading the log on from the cursor."""
        deadline = time.monotonic() + timeout
        while True:
            for line in await log_lines(self.c, self.trial_id, self.after):
                self.after = max(self.after, int(line["id"]))
                self.seen.append(line)
                if text(line).startswith(word + " "):
                    return float(text(line).split()[1])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.way}: no '{word}' line in {timeout:.0f} s")
            exp = await self.c.experiment(self.exp_id)
            if exp["state"] in ENDED:
                raise RuntimeError(f"{self.way}: experiment {self.exp_id} ended {exp['state']}")
            await asyncio.sleep(0.005)

    async def trial_state(self, state: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while (await self.c.trial(self.trial_id))["state"] != state:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.way}: trial {self.trial_id} never {state}")
            await asyncio.sleep(0.01)

    async def restart(self, kind: str) -> dict[str, Any]:
        """Pause the running trial and resume it (`kind` idle or at-once), timed."""
        await self.c.experiment_action(self.exp_id, "pause")
        await self.stamp("checkpointed")
        if kind == "idle":
            await self.trial_state("STATE_PAUSED")
            await asyncio.sleep(0.2)  # settled: nothing of the old run is in the way
            self.seen = []
            await self.c.experiment_action(self.exp_id, "activate")
            since = time.time()
        else:
            await self.c.experiment_action(self.exp_id, "activate")
            since = await self.stamp("last")
            self.seen = []
        first = await self.stamp("first")
        ready_at = await self.stamp("ready")
        return {"first": first - since, "ready": ready_at - since, "way": start_way(self.seen),
                **stages(self.seen, since)}

    async def end(self) -> None:
        await self.c.experiment_action(self.exp_id, "kill")


async def run(serves: dict[str, Serve], ctx: Path, restarts: int) -> dict[str, Any]:
    files = context.pack(ctx)
    probes = {w: Probe(w, Client(s.url)) for w, s in serves.items()}
    out: dict[str, Any] = {w: {"idle": [], "at once": []} for w in serves}
    try:
        for p in probes.values():
            await p.start(files)
            await p.stamp("ready")  # the warm-up run (the fork server imports torch)
            print(f"warm-up {p.way}: {start_way(p.seen)}", flush=True)
        for r in range(restarts):
            for kind in ("idle", "at once"):
                for w, p in probes.items():
                    got = await p.restart(kind)
                    out[w][kind].append(got)
                    print(f"restart {r + 1}/{restarts} {kind:7} {w:5}: first "
                          f"{got['first'] * 1000:6.0f} ms, ready {got['ready'] * 1000:6.0f} ms"
                          f"  ({got['way']})", flush=True)
    finally:
        for p in probes.values():
            try:
                if p.exp_id:
                    await p.end()
            finally:
                await p.c.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--restarts", type=int, default=10, help="of each kind, each way")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help="the serve processes to compare: fork,fresh (default) or one")
    args = parser.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if not ways or any(w not in WAYS for w in ways):
        parser.error("--ways: fork, fresh or fork,fresh")
    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ctx = root / "ctx"
        ctx.mkdir()
        (ctx / "trial.py").write_text(textwrap.dedent(TRIAL))
        serves: dict[str, Serve] = {}
        try:
            for w in ways:
                serves[w] = Serve(root / f"state-{w}", w)
            out = asyncio.run(run(serves, ctx, args.restarts))
        finally:
            for s in serves.values():
                s.stop()
    print(f"after: {load()}")
    print(f"\ntorch trial, {args.restarts} restarts of each kind, median (min-max):")
    for kind, since in (("idle", "activate returned"), ("at once", "old run's last line")):
        for w in ways:
            rs = out[w][kind]
            print(f"  {kind:7} {w:5}: {since} -> first line {ms([r['first'] for r in rs])}"
                  f",  -> ready (torch imported) {ms([r['ready'] for r in rs])}")
            for key, what in (("scheduled", "the master's attempt line"),
                              ("started", "the agent's start line")):
                if got := [r[key] for r in rs if key in r]:
                    print(f"  {kind:7} {w:5}:   of which {since} -> {what}: {ms(got)}")
        if len(ways) == 2:
            fk = statistics.median(r["ready"] for r in out["fork"][kind])
            fr = statistics.median(r["ready"] for r in out["fresh"][kind])
            print(f"  {kind:7} ratio fresh / fork (to ready): {fr / fk:.1f}x")
    for w in ways:
        rs = out[w]["idle"] + out[w]["at once"]
        seen = sorted({r["way"].split(" ")[0].rstrip(":") for r in rs})
        forks = [f for r in rs if (f := fork_ms(r["way"])) is not None]
        print(f"  {w}: restarts started {', '.join(seen)}"
              + (f"; fork itself median {statistics.median(forks):.0f} ms" if forks else "")
              + servers([r["way"] for r in rs]))
    if "fork" in out:
        worst = max(statistics.median(r["ready"] for r in out["fork"][k])
                    for k in ("idle", "at once"))
        print(f"target: a forked restart <= 0.2 s to its ready line (torch imported), both "
              f"kinds: {'met' if worst <= 0.2 else 'NOT met'} ({worst * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
