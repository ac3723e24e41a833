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
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

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


def dettui_side(trials: int) -> dict[str, Any]:
    from dettui import context
    from dettui.client import Client

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ctx_dir = root / "ctx"
        ctx_dir.mkdir()
        (ctx_dir / "trial.py").write_text(textwrap.dedent(TRIAL))
        proc = subprocess.Popen(
            [sys.executable, "-m", "dettui.cli", "serve", "--port", "0", "--state-dir",
             str(root / "state"), "--agent-slots", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True)
        try:
            assert proc.stdout is not None
            url = None
            while url is None:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("dettui serve did not start")
                m = re.search(r"listening on (http://\S+)", line)
                url = m.group(1) if m else None
            return asyncio.run(_run_search(url, ctx_dir, trials, Client, context))
        finally:
            proc.terminate()
            proc.wait(30)


async def _run_search(url: str, ctx_dir: Path, trials: int, client_cls: Any,
                      context: Any) -> dict[str, Any]:
    async with client_cls(url) as c:
        await c.login("determined", "")
        deadline = time.monotonic() + 30
        while not await c.agents():
            if time.monotonic() > deadline:
                raise RuntimeError("the embedded agent never registered")
            await asyncio.sleep(0.1)
        files = context.pack(ctx_dir)
        t0 = time.perf_counter()
        body = await c.create_experiment(CONFIG % trials, files, activate=True)
        exp_id = int(body["experiment"]["id"])
        while True:
            exp = await c.experiment(exp_id)
            if exp["state"] in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
                break
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - t0
        done = [t for t in await c.trials(exp_id) if t["state"] == "STATE_COMPLETED"]
        return {"seconds": seconds, "completed": len(done), "state": exp["state"]}


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
    args = parser.parse_args()
    n = 20 if args.quick else args.trials
    from rich.console import Console
    from rich.table import Table

    ours = dettui_side(n)
    theirs = ray_side(n)
    table = Table(title=f"random search, {n} trivial trials, 2 slots")
    for col in ("system", "trials completed", "seconds", "trials/s", "startup (not counted)"):
        table.add_column(col, justify="right")
    ours_rate = ours["completed"] / ours["seconds"]
    table.add_row("dettui", str(ours["completed"]), f"{ours['seconds']:.1f}",
                  f"{ours_rate:.2f}", "")
    if theirs is None:
        Console(width=120).print(table)
        print("Ray Tune is MISSING (no `ray` in this Python): only dettui was measured. Run "
              "`make bench-search`, which installs ray[tune] into .venv-bench, to compare.")
        sys.exit(0 if ours["completed"] == n else 1)
    theirs_rate = theirs["completed"] / theirs["seconds"]
    table.add_row("Ray Tune", str(theirs["completed"]), f"{theirs['seconds']:.1f}",
                  f"{theirs_rate:.2f}", f"ray.init {theirs['init']:.1f} s")
    table.add_row("ratio (dettui / Ray Tune)", "", "", f"{ours_rate / theirs_rate:.1f}x", "")
    Console(width=120).print(table)
    complete = ours["completed"] == n and theirs["completed"] == n
    print(f"target: at least 10x Ray Tune's trials/s: "
          f"{'met' if complete and ours_rate >= 10 * theirs_rate else 'NOT met'}")
    if not complete:
        print(f"NOT every trial completed (dettui {ours['completed']}/{n}, experiment "
              f"{ours['state']}; Ray Tune {theirs['completed']}/{n}): the rates are not comparable")
        sys.exit(1)


if __name__ == "__main__":
    main()
