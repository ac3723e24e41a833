"""Search throughput: the same random search of 200 trivial trials (each reports one validation
metric, x**2 for x uniform in [-1, 1]) on 2 slots, through dettui and through Ray Tune, in one
run; prints trials per second for both and the ratio.

    make bench-search                     # creates .venv-bench with ray[tune], then runs this
    .venv-bench/bin/python bench/search_throughput.py [--trials 200] [--quick]

dettui: `dettui serve --agent-slots 2` on 127.0.0.1, `searcher: random, max_trials: N,
max_concurrent_trials: 2`, timed from submitting to the experiment COMPLETED (every trial is a
real process started by the agent, reporting through dettui.core). Ray Tune: `ray.init(
num_cpus=2)` (timed separately), then `Tuner.fit()` with num_samples N and
max_concurrent_trials 2, a function trainable reporting the same metric once.

dettui runs twice in the same run, one `dettui serve` after the other: `--trial-start fork`
(every trial forked from the agent's fork server) and `--trial-start fresh` (a new interpreter
per trial); each first runs one warm-up trial (the fork server imports torch then), untimed.
For each, the serve process's CPU time (master + embedded agent; psutil, user + system) over
the timed search, divided by the trials, and how the agent says each trial started. `--ways
fork` or `--ways fresh` runs one of them; `--no-ray` leaves Ray Tune out.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

TRIAL = """
from dettui import core

with core.init() as ctx:
    x = ctx.info.trial.hparams["x"]
    ctx.train.report_validation_metrics(steps_completed=1, metrics={"loss": x * x})
"""
CONFIG = """
name: throughput
entrypoint: python3 trial.py
searcher: {name: random, metric: loss, max_trials: %d, max_concurrent_trials: 2}
hyperparameters:
  x: {type: double, minval: -1, maxval: 1}
max_restarts: 0
"""


def dettui_side(trials: int, way: str = "fork") -> dict[str, Any]:
    from _serve import Serve

    from dettui import context
    from dettui.client import Client

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ctx_dir = root / "ctx"
        ctx_dir.mkdir()
        (ctx_dir / "trial.py").write_text(textwrap.dedent(TRIAL))
        serve = Serve(root / "state", way, slots=2)
        try:
            return asyncio.run(_run_search(serve, ctx_dir, trials, Client, context))
        finally:
            serve.stop()


async def _run_search(serve: Any, ctx_dir: Path, trials: int, client_cls: Any,
                      context: Any) -> dict[str, Any]:
    from _serve import busy, fork_ms, log_lines, ready, servers, start_way

    async with client_cls(serve.url) as c:
        await ready(c)
        files = context.pack(ctx_dir)
        await _search(c, files, 1)  # warm-up: the fork server of this user imports torch
        cpu0, tree0, busy0 = serve.cpu(), serve.tree_cpu(), busy()
        t0 = time.perf_counter()
        exp_id, state = await _search(c, files, trials)
        seconds = time.perf_counter() - t0
        cpu, tree = serve.cpu() - cpu0, serve.tree_cpu() - tree0
        machine = busy() - busy0
        done = [t for t in await c.trials(exp_id) if t["state"] == "STATE_COMPLETED"]
        ways: dict[str, int] = {}
        why: set[str] = set()
        held: list[float] = []  # each run's allocation, start to end (seconds)
        forks: list[float] = []
        seen: list[str] = []
        for t in done:
            way = start_way(await log_lines(c, int(t["id"])))
            seen.append(way)
            if (f := fork_ms(way)) is not None:
                forks.append(f)
            task = (await c.request("GET", f"/api/v1/tasks/{t['taskId']}"))["task"]
            held += [_seconds(a["endTime"]) - _seconds(a["startTime"])
                     for a in task["allocations"] if a.get("endTime") and a.get("startTime")]
            key = way.split(":")[0].split(" ")[0]  # forked / fresh / ?
            ways[key] = ways.get(key, 0) + 1
            if key == "fresh":
                why.add(way)
        return {"seconds": seconds, "completed": len(done), "state": state,
                "cpu_per_trial": cpu / trials, "tree_per_trial": tree / trials,
                "machine_per_trial": machine / trials, "ways": ways, "why": sorted(why),
                "held": statistics.median(held) if held else 0.0,
                "occupied": sum(held) / (2 * seconds),
                "fork_ms": statistics.median(forks) if forks else None,
                "servers": servers(seen)}


def _seconds(stamp: Any) -> float:
    """An API time (RFC 3339 text, or Unix seconds) as Unix seconds."""
    if isinstance(stamp, int | float):
        return float(stamp)
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


async def _search(c: Any, files: Any, trials: int) -> tuple[int, str]:
    body = await c.create_experiment(CONFIG % trials, files, activate=True)
    exp_id = int(body["experiment"]["id"])
    while True:
        exp = await c.experiment(exp_id)
        if exp["state"] in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
            return exp_id, str(exp["state"])
        await asyncio.sleep(0.05)


def ray_side(trials: int) -> dict[str, Any] | None:
    try:
        import ray
        from ray import tune
    except ImportError:
        return None

    def trainable(config: dict[str, Any]) -> None:
        x = config["x"]
        try:
            tune.report({"loss": x * x})
        except TypeError:  # older Ray: keyword metrics
            tune.report(loss=x * x)

    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    init = time.perf_counter() - t0
    try:
        tuner = tune.Tuner(
            trainable, param_space={"x": tune.uniform(-1, 1)},
            tune_config=tune.TuneConfig(num_samples=trials, max_concurrent_trials=2,
                                        metric="loss", mode="min"),
            run_config=tune.RunConfig(verbose=0) if hasattr(tune, "RunConfig") else None)
        t0 = time.perf_counter()
        results = tuner.fit()
        seconds = time.perf_counter() - t0
        done = sum(1 for r in results if r.error is None and "loss" in (r.metrics or {}))
    finally:
        ray.shutdown()
    return {"seconds": seconds, "completed": done, "init": init}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 trials")
    parser.add_argument("--ways", default="fork,fresh",
                        help="how dettui starts trials: fork,fresh (default), fork or fresh")
    parser.add_argument("--no-ray", action="store_true", help="leave Ray Tune out")
    args = parser.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if not ways or any(w not in ("fork", "fresh") for w in ways):
        parser.error("--ways: fork, fresh or fork,fresh")
    n = 20 if args.quick else args.trials
    from _serve import load
    from rich.console import Console
    from rich.table import Table

    print(f"before: {load()}", flush=True)
    ours = {w: dettui_side(n, w) for w in ways}
    theirs = None if args.no_ray else ray_side(n)
    print(f"after: {load()}")
    table = Table(title=f"random search, {n} trivial trials, 2 slots")
    for col in ("system", "trials completed", "seconds", "trials/s", "serve CPU a trial",
                "started", "startup (not counted)"):
        table.add_column(col, justify="right")
    rates = {w: r["completed"] / r["seconds"] for w, r in ours.items()}
    for w, r in ours.items():
        started = ", ".join(f"{k} {v}" for k, v in sorted(r["ways"].items()))
        table.add_row(f"dettui {w}", str(r["completed"]), f"{r['seconds']:.1f}",
                      f"{rates[w]:.2f}", f"{r['cpu_per_trial'] * 1000:.1f} ms", started,
                      "1 warm-up trial")
    if theirs is not None:
        theirs_rate = theirs["completed"] / theirs["seconds"]
        table.add_row("Ray Tune", str(theirs["completed"]), f"{theirs['seconds']:.1f}",
                      f"{theirs_rate:.2f}", "", "", f"ray.init {theirs['init']:.1f} s")
    if "fork" in rates and "fresh" in rates:
        table.add_row("ratio (dettui fork / fresh)", "", "",
                      f"{rates['fork'] / rates['fresh']:.1f}x",
                      f"{ours['fresh']['cpu_per_trial'] / ours['fork']['cpu_per_trial']:.2f}x "
                      "less", "", "")
    if theirs is not None:
        for w in ours:
            table.add_row(f"ratio (dettui {w} / Ray Tune)", "", "",
                          f"{rates[w] / theirs_rate:.1f}x", "", "", "")
    Console(width=140).print(table)
    for w, r in ours.items():
        print(f"dettui {w}: CPU a trial: serve {r['cpu_per_trial'] * 1000:.1f} ms, serve and "
              f"everything under it (agent, fork server, trials) "
              f"{r['tree_per_trial'] * 1000:.1f} ms, the whole machine (every process, this "
              f"bench's polling and other users included) {r['machine_per_trial'] * 1000:.1f} "
              f"ms; 2 cores at that CPU a trial: at most "
              f"{2 / max(r['tree_per_trial'], 1e-9):.0f} trials/s")
        print(f"dettui {w}: a run holds its slot {r['held'] * 1000:.0f} ms (median, allocation "
              f"start to end); slots held {r['occupied'] * 100:.0f}% of the time"
              + (f"; the fork itself {r['fork_ms']:.0f} ms (median of the start lines)"
                 if r["fork_ms"] is not None else "") + r["servers"])
        for why in r["why"]:
            print(f"dettui {w}: {why}")
    complete = all(r["completed"] == n for r in ours.values())
    if "fork" in rates:
        print(f"target: at least 40 trials/s with the fork server: "
              f"{'met' if complete and rates['fork'] >= 40 else 'NOT met'} "
              f"({rates['fork']:.1f}/s)")
    if theirs is None:
        if not args.no_ray:
            print("Ray Tune is MISSING (no `ray` in this Python): only dettui was measured. "
                  "Run `make bench-search`, which installs ray[tune] into .venv-bench, to "
                  "compare.")
        sys.exit(0 if complete else 1)
    complete = complete and theirs["completed"] == n
    best = max(rates.values())
    print(f"target: at least 10x Ray Tune's trials/s: "
          f"{'met' if complete and best >= 10 * theirs_rate else 'NOT met'}")
    if not complete:
        print("NOT every trial completed (" + ", ".join(
            f"dettui {w} {r['completed']}/{n}, experiment {r['state']}"
            for w, r in ours.items()) + f"; Ray Tune {theirs['completed']}/{n}): the rates "
            "are not comparable")
        sys.exit(1)


if __name__ == "__main__":
    main()
