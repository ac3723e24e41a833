"""Submit latency: a torch script's first metric after `e create`, with the trial forked from
the agent's fork server and started fresh, against the same script run alone by `python`.

    .venv/bin/python bench/submit_latency.py [--runs 10] [--script torch|plain]

The script (`--script torch`, the default) prints its start time, then `import torch`,
`core.init()`, one training metric, exit; `--script plain` is bench/latency_ctx/report.py (no
torch). Two real `dettui serve` run side by side, one `--trial-start fork` and one
`--trial-start fresh`, each warmed by one trial first (its fork server imports torch then); each
round runs the script once alone (`python script.py`, timed from Popen to the line it prints
just before reporting) and once through each serve (the REST create call, as `dettui e create`
makes it). Measured from the create call returning: to the metric's own report time
(`reportTime`, stamped by the trial just before it posts), and to the metric stored on the
master (polled every 2 ms); and from the call starting to stored (the old figure, which holds
the upload of the context); on the way, the master's attempt line, the agent's start line and
the script's first line (their own timestamps). Medians, min-max, of
`--runs` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
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
)

from dettui import context  # noqa: E402
from dettui.client import Client  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAIN = HERE / "latency_ctx"
TORCH_SCRIPT = """
import time
print(f"first {time.time():.6f}", flush=True)

import torch

from dettui import core

with core.init() as ctx:
    loss = float(torch.ones(2).sum())
    print(f"report-at {time.time():.6f}", flush=True)
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": loss})
print("reported", flush=True)
"""
TORCH_CONFIG = """
name: latency-probe-torch
entrypoint: python3 report.py
searcher: {name: single, metric: loss, max_length: 1}
max_restarts: 0
"""


def make_context(script: str, root: Path) -> Path:
    if script == "plain":
        return PLAIN
    ctx = root / "ctx"
    ctx.mkdir()
    (ctx / "report.py").write_text(textwrap.dedent(TORCH_SCRIPT))
    (ctx / "latency.yaml").write_text(TORCH_CONFIG)
    return ctx


def alone(ctx: Path) -> float:
    """`python report.py` off-cluster: Popen to the report point (the torch script's
    `report-at` stamp; for the plain script, the line after the report)."""
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "report.py"], cwd=ctx, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    at = None
    for line in proc.stdout:
        if line.startswith("report-at "):
            at = float(line.split()[1])
        elif "reported" in line and at is None:
            at = time.time()
    proc.wait()
    if at is None:
        raise RuntimeError(f"report.py printed no report point (exit {proc.returncode})")
    return at - t0


async def through(c: Client, files: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """One experiment: create -> first metric, timed as the module docstring says."""
    t_call = time.time()
    body = await c.create_experiment(config, files)
    t_ret = time.time()
    exp_id = int(body["experiment"]["id"])
    trials: list[dict[str, Any]] = []
    while not trials:
        trials = await c.trials(exp_id)
        if not trials:
            await asyncio.sleep(0.002)
    trial_id = int(trials[0]["id"])
    while not (found := await c.metrics(trial_id, "training")):
        await asyncio.sleep(0.002)
    t_stored = time.time()
    reported = datetime.fromisoformat(str(found[0]["reportTime"])).timestamp()
    while (exp := await c.experiment(exp_id))["state"] not in (
            "STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
        await asyncio.sleep(0.02)
    if exp["state"] != "STATE_COMPLETED":
        raise RuntimeError(f"experiment {exp_id} ended {exp['state']}")
    way, lines = "?", []
    for _ in range(100):  # the start line may be shipped after the experiment ended
        if (way := start_way(lines := await log_lines(c, trial_id))) != "?":
            break
        await asyncio.sleep(0.02)
    return {"report": reported - t_ret, "stored": t_stored - t_ret,
            "stored_from_call": t_stored - t_call, "way": way, **stages(lines, t_ret)}


async def rounds(serves: dict[str, Serve], ctx: Path, runs: int) -> dict[str, Any]:
    config = (ctx / "latency.yaml").read_text()
    files = context.pack(ctx)
    out: dict[str, Any] = {"alone": [], **{w: [] for w in serves}}
    clients = {w: Client(s.url) for w, s in serves.items()}
    try:
        for w, c in clients.items():
            await ready(c)
            warm = await through(c, files, config)  # starts the fork server (imports torch)
            print(f"warm-up {w}: {warm['way']}", flush=True)
        alone(ctx)  # the page cache
        for r in range(runs):
            out["alone"].append(alone(ctx))
            for w, c in clients.items():
                out[w].append(await through(c, files, config))
            print(f"round {r + 1}/{runs}: alone {out['alone'][-1] * 1000:.0f} ms, "
                  + ", ".join(f"{w} {out[w][-1]['report'] * 1000:.0f} ms ({out[w][-1]['way']})"
                              for w in clients), flush=True)
    finally:
        for c in clients.values():
            await c.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--script", choices=["torch", "plain"], default="torch",
                        help="torch: import torch + one metric (default); plain: "
                        "bench/latency_ctx/report.py")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help="the serve processes to compare: fork,fresh (default) or one")
    args = parser.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if not ways or any(w not in WAYS for w in ways):
        parser.error("--ways: fork, fresh or fork,fresh")
    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ctx = make_context(args.script, root)
        serves: dict[str, Serve] = {}
        try:
            for w in ways:
                serves[w] = Serve(root / f"state-{w}", w)
            out = asyncio.run(rounds(serves, ctx, args.runs))
        finally:
            for s in serves.values():
                s.stop()
    print(f"after: {load()}")
    a = statistics.median(out["alone"])
    print(f"\n{args.script} script, {args.runs} rounds, median (min-max):")
    print(f"  python report.py alone, start -> report point:      {ms(out['alone'])}")
    for w in ways:
        rs = out[w]
        rep = [r["report"] for r in rs]
        forks = [f for r in rs if (f := fork_ms(r["way"])) is not None]
        print(f"  dettui {w:5}: create returned -> reportTime:       {ms(rep)}   "
              f"ratio to alone {statistics.median(rep) / a:.2f}x")
        for key, what in (("scheduled", "master's attempt line"),
                          ("started", "agent's start line"),
                          ("script", "script's first line")):
            if got := [r[key] for r in rs if key in r]:
                print(f"  dettui {w:5}: create returned -> {what + ':':23}{ms(got)}")
        print(f"  dettui {w:5}: create returned -> metric stored:    "
              f"{ms([r['stored'] for r in rs])}")
        print(f"  dettui {w:5}: create called -> metric stored:      "
              f"{ms([r['stored_from_call'] for r in rs])}")
        ways_seen = sorted({r["way"] if not r["way"].startswith("forked") else "forked"
                            for r in rs})
        print(f"      started: {', '.join(ways_seen)}"
              + (f"; fork itself median {statistics.median(forks):.0f} ms" if forks else "")
              + servers([r["way"] for r in rs]))
    if "fork" in out and "fresh" in out:
        fk = statistics.median(r["report"] for r in out["fork"])
        fr = statistics.median(r["report"] for r in out["fresh"])
        print(f"  ratio fresh / fork (to reportTime): {fr / fk:.1f}x")
    if "fork" in out:
        fk = statistics.median(r["stored"] for r in out["fork"])
        print(f"target: first metric stored <= 0.1 s after create returns (fork): "
              f"{'met' if fk <= 0.1 else 'NOT met'} ({fk * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
