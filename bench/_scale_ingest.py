"""Phase 5 of `bench/scale.py`: metric ingest. dettui over REST (batched, plain, one metric a
request) against MLflow's tracking server with the same loads, side by side; then the Core API
one report at a time in the environment of a real allocation."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

from _scale_load import Api, Ingest, ingest_rest
from _scale_procs import REPO, Lines, Mlflow, Processes, free_port
from _scale_report import Report

HERE = Path(__file__).resolve().parent
MLFLOW_VENV = HERE / ".venv-mlflow"  # made by `make bench-scale`
MLFLOW_PY = MLFLOW_VENV / "bin" / "python"


class IngestPhase:
    def __init__(self, api: Api, report: Report, procs: Processes, tmp: Path,
                 held: dict[str, dict[str, Any]], mlflow: bool) -> None:
        self.api = api
        self.report = report
        self.procs = procs
        self.tmp = tmp
        self.held = held
        self.with_mlflow = mlflow

    async def rest(self, metrics: int, single_calls: int) -> None:
        """dettui's three loads, then MLflow's two, one client each, requests in sequence."""
        ours = [
            await ingest_rest(self.api, self.held["hold-batched"],
                              "dettui /metrics/batch, 10 reports x 100 metrics a request",
                              metrics, 100, 10),
            await ingest_rest(self.api, self.held["hold-plain"],
                              "dettui /metrics, 1 report of 100 metrics a request",
                              metrics // 5, 100, 1),
            await ingest_rest(self.api, self.held["hold-single"],
                              "dettui /metrics, 1 metric a request", single_calls, 1, 1),
        ]
        for i in ours:
            self.row(i)
        if not self.with_mlflow:
            self.report.note("MLflow comparison skipped (--no-mlflow)")
        elif not (MLFLOW_VENV / ".installed-stamp").exists():
            self.report.add("ingest", "MLflow's server, side by side",
                            f"NOT MEASURED: {MLFLOW_VENV} has no mlflow (`make bench-scale` "
                            "installs it from PyPI; that install failed or was not run)",
                            "≥ 10x MLflow's log_batch", False)
        else:
            await self.mlflow(ours, metrics, single_calls)

    async def mlflow(self, ours: list[Ingest], metrics: int, single_calls: int) -> None:
        """The same loads against MLflow's server, started only now (its start-up must not
        load the machine while dettui is measured)."""
        r = self.report
        server = Mlflow(self.procs, MLFLOW_PY, self.tmp / "mlflow", free_port())
        try:
            version = await asyncio.to_thread(server.start)
            done = await asyncio.to_thread(
                subprocess.run, [str(MLFLOW_PY), str(HERE / "_scale_mlflow_worker.py"),
                                 server.url, str(metrics), str(single_calls)],
                capture_output=True, text=True, check=True)
        finally:
            server.stop()
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
        batched = Ingest(f"MLflow {version} log_batch, 1,000 metrics a call",
                         theirs["batched"]["metrics"], theirs["batched"]["calls"],
                         theirs["batched"]["seconds"])
        single = Ingest(f"MLflow {version} log_metric, 1 metric a call",
                        theirs["single"]["metrics"], theirs["single"]["calls"],
                        theirs["single"]["seconds"])
        self.row(batched)
        self.row(single)
        ratio = ours[0].rate / batched.rate
        r.add("ingest", "ratio dettui batched / MLflow log_batch", f"{ratio:.1f}x", "≥ 10x",
              ratio >= 10)
        r.add("ingest", "ratio dettui plain (100 metrics) / MLflow log_batch",
              f"{ours[1].rate / batched.rate:.1f}x")
        r.add("ingest", "ratio dettui 1 metric / MLflow log_metric (one at a time)",
              f"{ours[2].rate / single.rate:.1f}x")

    def row(self, i: Ingest) -> None:
        self.report.add("ingest", i.name, f"{i.rate:,.0f} metrics/s ({i.metrics:,} in "
                        f"{i.seconds:.1f} s, {i.requests / i.seconds:,.0f} requests/s)")

    async def core(self, rows: int, block: int) -> None:
        """`_scale_core_worker.py` in the held allocation's environment: reports per second
        per block, and the second half of the blocks against the first."""
        r = self.report
        env = {**os.environ, **self.held["hold-core"]["env"]}
        with open(self.tmp / "core.log", "w") as log:
            proc = self.procs.popen(
                [sys.executable, str(HERE / "_scale_core_worker.py"), str(rows), str(block)],
                stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=REPO)
            lines = Lines(proc)
            await asyncio.to_thread(proc.wait)
        blocks = [b for b in lines.items if "block" in b]
        flush = next((b["flush"] for b in lines.items if "flush" in b), float("nan"))
        if proc.returncode != 0 or len(blocks) < 2:
            why = (self.tmp / "core.log").read_text().strip().splitlines()[-1:]
            r.add("ingest", "Core API one at a time",
                  f"FAILED (exit {proc.returncode}): {''.join(why)[:300]}", "no decline", False)
            return
        rates = [b["rows"] / b["seconds"] for b in blocks]
        r.add("ingest", f"Core API report_training_metrics one at a time, per block of "
              f"{block:,}", " ".join(f"{x:,.0f}" for x in rates) + " reports/s")
        half = len(rates) // 2
        ratio = fmean(rates[-half:]) / fmean(rates[:half])
        r.add("ingest", f"Core API: second half of the blocks / first half ({len(blocks) * block:,}"
              f" rows; flush at close {flush:.1f} s)", f"{ratio:.2f}", "no decline (≥ 0.8)",
              ratio >= 0.8)
