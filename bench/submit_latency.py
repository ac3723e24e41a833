"""Submit latency: `e create` to the first training metric stored, against the floor of running
the same script directly with python. Prints both, the overhead, and the ratio.

    .venv/bin/python bench/submit_latency.py [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dettui import context
from dettui.client import Client

HERE = Path(__file__).resolve().parent
CTX = HERE / "latency_ctx"


def direct_floor(runs: int) -> list[float]:
    """Process start to the metric reported, with the same script off-cluster."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "report.py"], cwd=CTX, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "reported" in line:
                out.append(time.perf_counter() - t0)
                break
        proc.wait()
    return out


def start_serve(state: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "dettui.cli", "serve", "--port", "0",
                             "--state-dir", str(state)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("dettui serve did not start")


async def first_metric_latency(c: Client, files: list[dict], config: str) -> float:
    t0 = time.perf_counter()
    body = await c.create_experiment(config, files)
    exp_id = body["experiment"]["id"]
    trial_id = (await c.trials(exp_id))[0]["id"]
    while not await c.metrics(trial_id, "training"):
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - t0
    while (await c.experiment(exp_id))["state"] not in ("STATE_COMPLETED", "STATE_ERROR"):
        await asyncio.sleep(0.05)
    return elapsed


async def through_dettui(url: str, runs: int) -> list[float]:
    config = (CTX / "latency.yaml").read_text()
    files = context.pack(CTX)
    async with Client(url) as c:
        await c.login("determined", "")
        while not await c.agents():
            await asyncio.sleep(0.05)
        await first_metric_latency(c, files, config)  # warm-up
        return [await first_metric_latency(c, files, config) for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    direct_floor(1)  # warm the page cache
    floor = direct_floor(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_serve(Path(tmp) / "state")
        try:
            ours = asyncio.run(through_dettui(url, args.runs))
        finally:
            proc.terminate()
            proc.wait(30)
    f, d = statistics.median(floor), statistics.median(ours)
    print(f"runs: {args.runs}")
    print(f"python report.py directly (floor), median: {f * 1000:7.0f} ms "
          f"(min {min(floor) * 1000:.0f}, max {max(floor) * 1000:.0f})")
    print(f"dettui e create -> first metric, median:   {d * 1000:7.0f} ms "
          f"(min {min(ours) * 1000:.0f}, max {max(ours) * 1000:.0f})")
    print(f"overhead: {(d - f) * 1000:.0f} ms   ratio dettui/floor: {d / f:.2f}x   "
          f"(target overhead <= 500 ms; Determined: ~5.6 s scheduling -> first harness line)")


if __name__ == "__main__":
    main()
