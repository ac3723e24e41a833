"""The master at lab scale (issue 13): a real `dettui serve --no-agent` on 127.0.0.1, driven by
simulated agents speaking the real agent protocol, 10,000 experiments / 100,000 trials created
over REST, 10 million metric rows, 10 dashboards on the push stream, and MLflow's tracking
server side by side for metric ingest. Every figure is printed next to its target.

    make bench-scale                      # the full size (about half an hour here)
    make bench-scale SCALE=0.1            # every size times 0.1: a few minutes
    .venv/bin/python bench/scale.py --scale 0.1 --no-mlflow

Phases, in order (what each measures is printed as it goes):
 1. a master with its own state and config dirs; an agent credential per simulated agent
    (issued by the admin); the agents (`_scale_agents.py`, one process) register and run
    every allocation they are given for a random few seconds, reporting metrics.
 2. experiments held by the agents for the ingest phase (`hold-*`), then `--experiments`
    random searches of 10 trials, created concurrently: the create rate per block. Meanwhile
    the agents' "exit -> next start" (the scheduling pass, seen from outside) is collected; a
    few experiments are killed.
 3. `--metric-rows` rows: through the API's batch route for `--seed-api-seconds`, the rest
    (if any) written into the stopped master's SQLite file (`_scale_seed.py` says why); the
    master started again on that file (start-up time, agents re-register).
 4. `--dashboards` stream clients attached (`_scale_dash.py`); API p50/p99 per endpoint (the
    lists at their first, middle and last page), `dettui job list` / `dettui e list`, the
    dashboard's first paint; then experiments with the largest contexts (`--big-contexts`)
    and the same list pages again, then the page holding them against the page of tiny ones
    next to it, a GET of each in turn (the target: both under the same load); `--marks`
    changes (an experiment's description with a marker, every 0.25 s) timed to every
    dashboard, and split into the change's own request and what follows its answer.
 5. the agents frozen (heartbeats only): metric ingest over REST (batched, plain) against
    MLflow's server (log_batch of 1,000, log_metric); the Core API one report at a time in
    blocks; the trial with those rows read back.
 6. master RSS (peak, end) and the database's size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scale_ingest import IngestPhase  # noqa: E402
from _scale_load import (  # noqa: E402
    Api,
    Timing,
    context_files,
    create_experiments,
    percentiles,
    time_command,
    time_endpoint,
    time_turns,
)
from _scale_procs import (  # noqa: E402
    REPO,
    Lines,
    Master,
    Processes,
    cpu_seconds,
    free_port,
)
from _scale_report import Report, ms  # noqa: E402
from _scale_seed import seed, seed_api  # noqa: E402

from dettui.screens.base import ApiScreen  # noqa: E402

HERE = Path(__file__).resolve().parent
Endpoint = tuple[str, str, dict[str, str]]  # what the report calls it, path, query
HOLDS = ("hold-batched", "hold-plain", "hold-single", "hold-core")


@dataclass(frozen=True)
class Sizes:
    agents: int = 100
    slots: int = 8
    experiments: int = 10_000
    trials: int = 10
    metric_rows: int = 10_000_000
    big_contexts: int = 2
    big_context_mib: int = 94  # the largest context the master takes is 95.0 MiB
    dashboards: int = 10
    marks: int = 200
    samples: int = 50
    ingest_metrics: int = 200_000
    single_calls: int = 500
    core_rows: int = 1_000_000
    core_block: int = 100_000
    concurrency: int = 8
    block: int = 1000
    run: str = "5,30"
    endpoint_seconds: int = 30  # at most this long timing one endpoint
    seed_api_seconds: int = 3600  # the whole 10M through the API if it keeps ~3k rows/s

    @classmethod
    def scaled(cls, factor: float) -> Sizes:
        """Every count times `factor` (with floors that keep each figure meaningful); the
        shape (8 slots an agent, 10 trials an experiment, 10 dashboards) stays."""
        if not 0 < factor <= 1:
            raise ValueError(f"--scale must be in (0, 1], not {factor}")
        full = cls()
        if factor == 1:
            return full

        def times(n: int, floor: int) -> int:
            return max(floor, round(n * factor))

        core_rows = times(full.core_rows, 20_000)
        return cls(
            agents=times(full.agents, 4), experiments=times(full.experiments, 100),
            metric_rows=times(full.metric_rows, 50_000),
            big_contexts=1 if factor < 0.5 else full.big_contexts,
            marks=times(full.marks, 20), samples=times(full.samples, 20),
            ingest_metrics=times(full.ingest_metrics, 20_000),
            single_calls=times(full.single_calls, 200), core_rows=core_rows,
            core_block=core_rows // 10, block=times(full.block, 100),
            run="2,8" if factor < 0.5 else full.run,
            # seeding: a sample of the API's rate, the rest into SQLite
            endpoint_seconds=10, seed_api_seconds=60)


class Bench:
    def __init__(self, sizes: Sizes, args: argparse.Namespace, tmp: Path) -> None:
        self.sizes = sizes
        self.args = args
        self.tmp = tmp
        self.procs = Processes()
        self.master = Master(self.procs, tmp / "state", tmp / "config", free_port(),
                             profile=args.profile_master)
        self.report = Report(f"dettui at scale: {sizes.agents} agents x {sizes.slots} slots, "
                             f"{sizes.experiments:,} experiments x {sizes.trials} trials, "
                             f"{sizes.metric_rows:,} metric rows, {sizes.dashboards} dashboards")
        self.user_token = ""
        self.agents: Lines | None = None
        self.held: dict[str, dict[str, Any]] = {}
        self.exp_ids: list[int] = []
        self.big_ids: list[int] = []  # the experiments with the largest contexts
        self.agent_stats: list[dict[str, Any]] = []

    # --- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        self.master.state_dir.mkdir(parents=True)
        self.master.config_dir.mkdir(parents=True)
        self.master.start()
        admin = self.master.login("admin")
        self.user_token = self.master.login("determined")
        tokens = [self.master.call("POST", "/api/v1/agent-credentials",
                                   {"description": f"scale sim {i}"}, admin)["token"]
                  for i in range(self.sizes.agents)]
        (self.tmp / "agent-tokens.json").write_text(json.dumps(tokens))
        subprocess.run([sys.executable, "-m", "dettui.cli", "user", "login", "determined",
                        "--password", ""], env=self.master.env(), check=True,
                       capture_output=True)

    async def start_agents(self) -> None:
        s = self.sizes
        proc = self.procs.popen(
            [sys.executable, str(HERE / "_scale_agents.py"), self.master.url,
             str(self.tmp / "agent-tokens.json"), "--agents", str(s.agents), "--slots",
             str(s.slots), "--run", s.run], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.tmp / "agents.log", "w"), text=True, cwd=REPO)  # noqa: SIM115
        self.agents = Lines(proc)
        await self.agents.wait("ready", timeout=120)

    async def collect_agent_stats(self) -> dict[str, Any]:
        assert self.agents is not None
        before = len(self.agents.of("stats"))
        self.agents.send("stats")
        stats = (await self.agents.wait("stats", before + 1, timeout=60))[-1]
        self.agent_stats.append(stats)
        return stats

    # --- phase 2: creation -----------------------------------------------------------------

    async def create(self, api: Api) -> None:
        s, r = self.sizes, self.report
        print(f"\n[2] creating {s.experiments:,} experiments x {s.trials} trials "
              f"({s.concurrency} requests in flight)", flush=True)
        hold = await create_experiments(api, list(HOLDS), 1, 4)
        if hold.failures:
            raise RuntimeError(f"cannot create the held experiments: {hold.failures[:2]}")
        assert self.agents is not None
        for event in await self.agents.wait("held", len(HOLDS), timeout=120):
            self.held[event["name"]] = event
        await self.collect_agent_stats()  # start the scheduling gaps afresh
        names = [f"scale-{i}" for i in range(s.experiments)]
        cpu_before = self.cpu_split()
        created = await create_experiments(api, names, s.trials, s.concurrency,
                                           budget=self.args.create_budget)
        cpu = {k: v - cpu_before[k] for k, v in self.cpu_split().items()}
        self.exp_ids = sorted(created.ids)
        if len(created.ids) + len(created.failures) < s.experiments:
            r.add("create", "NOT REACHED: creation stopped at the time budget",
                  f"{len(created.ids):,} of {s.experiments:,} in {self.args.create_budget:.0f} s "
                  "(--create-budget); the rest of the run is at this size", "", False)
        rates = created.block_rates(s.block)
        overall = len(created.ids) / created.seconds
        r.add("create", f"experiments created ({s.trials} trials each)",
              f"{len(created.ids):,} in {created.seconds:.1f} s = {overall:.0f}/s",
              "≥ 500/s sustained", overall >= 500 and min(rates, default=0) >= 500)
        r.add("create", f"rate per block of {s.block:,} (first .. last)",
              " ".join(f"{x:.0f}" for x in rates) + " /s")
        cores = os.cpu_count() or 1
        used = cpu["master"] + cpu["workers"] + cpu["agents"] + cpu["bench"]
        per = 1000 / max(1, len(created.ids))
        r.add("create", f"CPU used meanwhile, of {cores} cores x {created.seconds:.1f} s "
              "(ms an experiment)",
              f"master {cpu['master']:.1f} s ({cpu['master'] * per:.2f}), its workers "
              f"{cpu['workers']:.1f} s ({cpu['workers'] * per:.2f}), simulated agents "
              f"{cpu['agents']:.1f} s ({cpu['agents'] * per:.2f}), this bench "
              f"{cpu['bench']:.1f} s ({cpu['bench'] * per:.2f}); "
              f"{used / (cores * created.seconds):.0%} busy")
        if created.failures:
            r.add("create", "creation failures", f"{len(created.failures)}: "
                  f"{created.failures[0][:200]}", "0", False)
        stats = await self.collect_agent_stats()
        self.report_agents("during creation", stats)

    def cpu_split(self) -> dict[str, float]:
        """CPU seconds so far: the master (its own process), its workers, the simulated
        agents, this bench."""
        assert self.master.proc is not None and self.agents is not None
        own, tree = cpu_seconds(self.master.proc.pid)
        times = os.times()
        return {"master": own, "workers": tree - own,
                "agents": cpu_seconds(self.agents.proc.pid)[1],
                "bench": times.user + times.system}

    def report_agents(self, when: str, stats: dict[str, Any]) -> None:
        gap50, gap99 = percentiles(stats["gaps_ms"])
        hb50, hb99 = percentiles(stats["heartbeat_ms"])
        ex50, ex99 = percentiles(stats["exit_ms"])
        self.report.add("scheduling", f"exit -> next start {when} (p50 / p99, n)",
                        f"{gap50:.0f} / {gap99:.0f} ms, {len(stats['gaps_ms'])}")
        self.report.add("scheduling", f"agent requests {when}: heartbeat, exit report "
                        "(p50 / p99)", f"{hb50:.0f} / {hb99:.0f} ms, {ex50:.0f} / {ex99:.0f} ms")
        self.report.add("scheduling", f"allocations {when}: started, exited, killed; failed "
                        "agent requests",
                        f"{stats['started']}, {stats['exited']}, {stats['killed']}; "
                        f"{stats['errors']}")

    async def kill_some(self, api: Api) -> None:
        """Kill a few experiments that have running trials: the agents must see the kills."""
        _, jobs = await api.call("GET", "/api/v1/job-queues-v2", params={"limit": "200"})
        running = [j["full"] for j in jobs["jobs"] if j["full"]["allocatedSlots"] > 0
                   and str(j["full"]["name"]).startswith("scale-")]
        for job in running[:3]:
            await api.call("POST", f"/api/v1/experiments/{job['entityId']}/kill")
        await asyncio.sleep(3)
        stats = await self.collect_agent_stats()
        self.report.add("scheduling", f"kills: {len(running[:3])} experiments killed",
                        f"{stats['killed']} allocations ended as killed by their agents")

    # --- phase 3: metric rows --------------------------------------------------------------

    async def seed_metrics(self) -> None:
        s, r = self.sizes, self.report
        print(f"\n[3] seeding {s.metric_rows:,} metric rows: through the API's batch route for "
              f"up to {s.seed_api_seconds} s, the rest into SQLite (master stopped)", flush=True)
        api = await seed_api(self.master.url, self.user_token, self.master.state_dir / "master.db",
                             s.metric_rows, s.seed_api_seconds)
        rate = api["rate"]
        rest = s.metric_rows - api["rows"]
        r.add("metric rows", f"through POST /trials/{{id}}/metrics/batch ({api['per_trial']} "
              "training reports a request, 8 in flight, agents running)",
              f"{api['rows']:,} rows into {len(api['trials']):,} trials in {api['seconds']:.0f} s "
              f"= {rate:,.0f} rows/s; {api['refused']:,} refused, {api['errors']} failed requests")
        if rest > 0:
            eta = s.metric_rows / rate / 60 if rate else float("inf")
            r.note(f"seeding: {s.metric_rows:,} rows through the API at {rate:,.0f} rows/s would "
                   f"take {eta:,.0f} min on this machine (--seed-api-seconds "
                   f"{s.seed_api_seconds}); {rest:,} of them were written straight "
                   "into the master's SQLite file while it was stopped (bench/_scale_seed.py: "
                   "the rows the API stores, training and every tenth a validation); ingest "
                   "itself is measured through the API in phase [5]")
        self.rss_before_restart = self.master.rss
        self.master.stop()
        if rest > 0:
            done = await asyncio.to_thread(seed, self.master.state_dir / "master.db", rest,
                                           exclude=frozenset(api["trials"]))
            r.add("metric rows", "the rest written into SQLite (master stopped)",
                  f"{done['rows']:,.0f} rows over {done['trials']:,.0f} trials in "
                  f"{done['seconds']:.0f} s ({done['rate']:,.0f} rows/s)")
        seconds = self.master.start()
        r.add("metric rows", "master start-up on that database (until it answers)",
              f"{seconds:.1f} s")
        if rest > 0:  # the seeded rows' summaries and bests, computed while the master serves
            waited = await asyncio.to_thread(self.master.wait_backfill, 1800)
            r.add("metric rows", "then the background backfill of their summaries and bests",
                  "not done in 30 min" if waited is None else f"{waited:.0f} s more")
        t0 = time.monotonic()
        while True:
            _, agents = await asyncio.to_thread(
                lambda: (0, self.master.call("GET", "/api/v1/agents", token=self.user_token)))
            if len(agents["agents"]) >= s.agents or time.monotonic() - t0 > 120:
                break
            await asyncio.sleep(0.5)
        r.add("metric rows", "agents registered again after the restart",
              f"{len(agents['agents'])} of {s.agents} in {time.monotonic() - t0:.1f} s")
        await asyncio.sleep(5)  # the exits held back while the master was down go in
        await self.collect_agent_stats()  # what follows starts afresh

    # --- phase 4: reads, stream ------------------------------------------------------------

    async def reads(self, api: Api) -> None:
        s = self.sizes
        print(f"\n[4] API under load ({s.agents} agents, {s.dashboards} dashboards)", flush=True)
        lists = await self.list_pages(api)
        tiny = {}
        for name, path, params in lists:
            tiny[name] = t = await time_endpoint(api, name, path, params, s.samples,
                                                 budget=s.endpoint_seconds)
            self.endpoint(t, True)
        exp_id = self.exp_ids[len(self.exp_ids) // 2]
        _, trials = await api.call("GET", f"/api/v1/experiments/{exp_id}/trials")
        trial_id = int(trials["trials"][0]["id"])
        _, metrics = await api.call("GET", f"/api/v1/trials/{trial_id}/metrics")
        endpoints: list[tuple[str, str, dict[str, str] | None]] = [
            ("job queue, whole (dettui's clients: includeIdle)", "/api/v1/job-queues-v2",
             {"includeIdle": "true"}),
            ("an experiment", f"/api/v1/experiments/{exp_id}", None),
            (f"a trial's metrics ({len(metrics.get('metrics', []))} rows)",
             f"/api/v1/trials/{trial_id}/metrics", None),
            ("agents", "/api/v1/agents", None),
        ]
        for name, path, params in endpoints:
            t = await time_endpoint(api, name, path, params, s.samples,
                                    budget=s.endpoint_seconds)
            self.endpoint(t, False)
        env = self.master.env()
        for name, cmd in (("dettui --version (start-up floor)", ["--version"]),
                          ("dettui job list", ["job", "list"]), ("dettui e list", ["e", "list"])):
            t = await asyncio.to_thread(time_command, name,
                                        [sys.executable, "-m", "dettui.cli", *cmd], env,
                                        max(s.samples // 10, 3))
            self.endpoint(t, name == "dettui job list", target=0.5)
        await self.paint(api)
        await self.big_contexts(api, lists, tiny)

    async def list_pages(self, api: Api) -> list[tuple[str, str, dict[str, str]]]:
        """The lists at their first, middle and last page of 100 (Determined's offset/limit:
        a master that does not page answers the whole list, and the size shows it)."""
        _, first = await api.call("GET", "/api/v1/experiments", params={"limit": "1"})
        total = int(first.get("pagination", {}).get("total") or len(self.exp_ids))
        _, queue = await api.call("GET", "/api/v1/job-queues-v2", params={"limit": "1"})
        jobs = int(queue.get("pagination", {}).get("total") or len(queue.get("jobs", [])))
        exp_id = self.exp_ids[len(self.exp_ids) // 2]
        page = 100
        out = []
        for what, path, n in (("experiments", "/api/v1/experiments", total),
                              ("job queue", "/api/v1/job-queues-v2", jobs)):
            # the last page counted from the end (a negative offset): jobs end while the bench
            # runs, and an offset computed here went out of bounds
            for where, offset in (("first", 0), ("middle", n // 2),
                                  ("last", -min(page, n))):
                out.append((f"{what}, {where} page of {page} (offset {offset:,})", path,
                            {"offset": str(offset), "limit": str(page)}))
        out.append((f"an experiment's trials, first page of {page}",
                    f"/api/v1/experiments/{exp_id}/trials", {"offset": "0", "limit": str(page)}))
        return out

    async def big_contexts(self, api: Api, lists: list[tuple[str, str, dict[str, str]]],
                           tiny: dict[str, Timing]) -> None:
        """The same list pages again once experiments with the largest contexts are queued:
        no slower than with tiny contexts (a list never reads a context)."""
        s, r = self.sizes, self.report
        if not s.big_contexts:
            return
        print(f"\n[4] {s.big_contexts} experiment(s) with a {s.big_context_mib} MiB context, "
              "then the same lists again", flush=True)
        # The tiny-context baseline again, just before: the cluster has moved on since the
        # lists were first timed (more metrics, jobs started and ended), and only the
        # contexts may differ between the two sides.
        for name, path, params in lists:
            tiny[name] = await time_endpoint(api, name, path, params, s.samples,
                                             budget=s.endpoint_seconds)
        big = await create_experiments(
            api, [f"bigctx-{i}" for i in range(s.big_contexts)], s.trials, 1,
            context_files(s.big_context_mib * 2**20))
        self.big_ids = list(big.ids)
        r.add("create", f"experiments with a {s.big_context_mib} MiB context: {s.big_contexts}",
              f"{big.seconds / s.big_contexts:.1f} s each (upload and store)"
              + (f", {len(big.failures)} failed: {big.failures[0][:200]}"
                 if big.failures else ""), "", False if big.failures else None)
        # Each list again, now that the big contexts are queued (for the record: minutes
        # apart, on a cluster that keeps changing, the worst of 50 samples moved 0.6-2x
        # between runs with no change that touches contexts).
        for name, path, params in lists:
            t = await time_endpoint(api, name, path, params, s.samples,
                                    budget=s.endpoint_seconds)
            before = tiny[name]
            what = f"{name}: before and after they were queued"
            if t.error or before.error:
                r.add("big contexts", what, f"FAILED: {t.error or before.error}", "", False)
                continue
            r.add("big contexts", what,
                  f"p50 {ms(before.p50)} -> {ms(t.p50)}, p99 {ms(before.p99)} -> {ms(t.p99)}")
        # The target: a page that holds big-context experiments against the page of tiny
        # ones next to it in the same list, a GET of each in turn (both under the same load).
        for what, holding, tiny_page in await self.context_pages(api):
            if holding is None or tiny_page is None:
                r.add("big contexts", what, "FAILED: no page held them", "", False)
                continue
            big_t, tiny_t = await time_turns(api, [holding, tiny_page], s.samples * 4,
                                             budget=2 * s.endpoint_seconds)
            if big_t.error:
                r.add("big contexts", what, f"FAILED: {big_t.error}", "", False)
                continue
            ratio = big_t.p99 / tiny_t.p99
            r.add("big contexts", what,
                  f"p50 {ms(big_t.p50)} vs {ms(tiny_t.p50)}, p99 {ms(big_t.p99)} vs "
                  f"{ms(tiny_t.p99)} = {ratio:.2f}x (n={len(big_t.times)} each)",
                  "no slower (p99 ≤ 1.25x, noise)", ratio <= 1.25)

    async def context_pages(self, api: Api) -> list[tuple[str, Endpoint | None,
                                                          Endpoint | None]]:
        """The page of 100 holding the big-context experiments in the experiments list and
        in the job queue, each with the page of 100 tiny ones before it; a big one's trials
        with those of the tiny one created last."""
        big = set(self.big_ids)
        out: list[tuple[str, Endpoint | None, Endpoint | None]] = []
        for what, path, key in (("experiments", "/api/v1/experiments", "experiments"),
                                ("job queue", "/api/v1/job-queues-v2", "jobs")):
            holding: Endpoint | None = None
            tiny_page: Endpoint | None = None
            for back in range(1, 30):  # from the end: they were created last
                params = {"offset": str(-100 * back), "limit": "100"}
                _, body = await api.call("GET", path, params=params)
                ids = {int((item.get("full") or item)["entityId" if key == "jobs" else "id"])
                       for item in body.get(key, [])}
                if holding is None and ids & big:
                    holding = (f"{what}, the page of 100 holding them", path, params)
                elif holding is not None and not ids & big:
                    tiny_page = (f"{what}, the page of 100 before it", path, params)
                    break
            out.append((f"{what}: the page of 100 holding them vs the one before it",
                        holding, tiny_page))
        trials = {"offset": "0", "limit": "100"}
        out.append(("an experiment's trials, first page of 100: a big one's vs a tiny one's",
                    (f"trials of experiment {self.big_ids[0]}",
                     f"/api/v1/experiments/{self.big_ids[0]}/trials", trials),
                    (f"trials of experiment {self.exp_ids[-1]}",
                     f"/api/v1/experiments/{self.exp_ids[-1]}/trials", trials)))
        return out

    def endpoint(self, t: Timing, paged: bool, target: float = 0.05) -> None:
        what = f"{t.name} ({t.bytes / 1024:,.0f} KiB)"
        if t.error:
            self.report.add("API", what, f"FAILED: {t.error}", "", False)
            return
        value = f"{ms(t.p50)} / {ms(t.p99)} (n={len(t.times)})"
        if paged:
            self.report.add("API", what, value, f"p99 ≤ {ms(target)}", t.p99 <= target)
        else:
            self.report.add("API", what, value)

    async def paint(self, api: Api) -> None:
        """The dashboard's launch to all jobs shown; the agents frozen meanwhile (heartbeats
        only), so that the queue holds still while it is counted."""
        assert self.agents is not None
        self.agents.send("freeze")
        await asyncio.sleep(2)
        try:
            await self._paint(api)
        finally:
            self.agents.send("thaw")

    async def _paint(self, api: Api) -> None:
        _, queue = await api.call("GET", "/api/v1/job-queues-v2?includeIdle=true&limit=1")
        total = int(queue["pagination"]["total"])
        jobs = min(total, ApiScreen.WINDOW)  # the queue screen's first window of the list
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, str(HERE / "_scale_paint.py"), self.master.url,
                             str(jobs), "180"], env=self.master.env(),
            capture_output=True, text=True, cwd=REPO)
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            result = {"error": done.stderr.strip()[-300:]}
        if "seconds" in result:
            self.report.add("API", f"dashboard first full paint ({jobs:,} of {total:,} jobs)",
                            f"{result['seconds'] * 1000:.0f} ms", "≤ 500 ms",
                            result["seconds"] <= 0.5)
        else:
            self.report.add("API", f"dashboard first full paint ({jobs:,} of {total:,} jobs)",
                            f"FAILED: {result.get('error')}", "≤ 500 ms", False)

    async def stream(self, api: Api) -> None:
        s, r = self.sizes, self.report
        watched = random.Random(1).sample(self.exp_ids, min(s.dashboards, len(self.exp_ids)))
        t0 = time.monotonic()
        proc = self.procs.popen(
            [sys.executable, str(HERE / "_scale_dash.py"), self.master.url, self.user_token,
             *map(str, watched)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            cwd=REPO)
        dash = Lines(proc)
        ready = (await dash.wait("ready", timeout=300))[0]
        r.add("stream", f"{s.dashboards} dashboards attached, 4 snapshots each",
              f"{time.monotonic() - t0:.1f} s, {ready['bytes'] / 2**20:.1f} MiB received")
        await self.reads(api)
        print(f"\n[4] stream: {s.marks} changes to {s.dashboards} dashboards", flush=True)
        sent: dict[int, float] = {}
        answered: dict[int, float] = {}
        # the dashboards' experiments window: the newest, the big-context ones among them
        shown = sorted([*self.exp_ids, *self.big_ids])[-ApiScreen.WINDOW:]
        for n in range(s.marks):
            exp_id = random.choice(shown)
            sent[n] = time.monotonic()
            await api.call("PATCH", f"/api/v1/experiments/{exp_id}",
                           {"description": f"scale-mark-{n}"})
            answered[n] = time.monotonic()
            await asyncio.sleep(0.25)
        with contextlib.suppress(RuntimeError):
            await dash.wait("mark", s.marks * len(watched), timeout=30)
        assert proc.stdin is not None
        proc.stdin.close()
        with contextlib.suppress(RuntimeError):
            await dash.wait("done", timeout=30)
        arrivals: dict[tuple[int, int], float] = {}
        for m in dash.of("mark"):  # the first diff that carries it (later diffs of the same
            key = (m["mark"], m["client"])  # experiment repeat its description)
            arrivals[key] = min(m["t"], arrivals.get(key, m["t"]))
        latencies = [t - sent[mark] for (mark, _), t in arrivals.items() if mark in sent]
        missing = s.marks * len(watched) - len(latencies)
        p50, p99 = percentiles(latencies)
        r.add("stream", f"change -> diff at each dashboard (p50 / p99, n={len(latencies)})",
              f"{ms(p50)} / {ms(p99)}" + (f", {missing} never arrived" if missing else ""),
              "p99 ≤ 100 ms", p99 <= 0.1 and not missing)
        # where the time went: the change itself (the PATCH, through the store's writer), then
        # from its answer to the diff's arrival (the feed's read, encoding, the sockets)
        p50, p99 = percentiles([answered[n] - sent[n] for n in answered])
        r.add("stream", f"  of which the change's own request (p50 / p99, n={len(answered)})",
              f"{ms(p50)} / {ms(p99)}")
        after = [t - answered[mark] for (mark, _), t in arrivals.items() if mark in answered]
        p50, p99 = percentiles(after)
        r.add("stream", "  and from its answer to each dashboard (p50 / p99)",
              f"{ms(p50)} / {ms(p99)}")
        done = dash.of("done")
        if done:
            r.add("stream", "dashboards received in all", f"{done[0]['messages']:,} messages, "
                  f"{done[0]['bytes'] / 2**20:.1f} MiB, {done[0]['disconnects']} disconnects")
        self.procs.stop(proc)
        stats = await self.collect_agent_stats()
        self.report_agents("under reads", stats)

    # --- phase 5: ingest -------------------------------------------------------------------

    async def ingest(self, api: Api) -> None:
        assert self.agents is not None
        self.agents.send("freeze")
        print("\n[5] metric ingest: dettui vs MLflow (agents frozen: heartbeats only)",
              flush=True)
        s = self.sizes
        phase = IngestPhase(api, self.report, self.procs, self.tmp, self.held,
                            mlflow=not self.args.no_mlflow)
        await phase.rest(s.ingest_metrics, s.single_calls)
        await phase.core(s.core_rows, s.core_block)

    async def big_trial(self, api: Api) -> None:
        """The Core API's trial read back whole, once (GET /api/v1/trials/{id}/metrics)."""
        name = "the Core API's trial: all its metrics, read once"
        assert self.master.rss is not None
        self.master.rss.sample()
        self.peak_before_big_read = self.master.rss.peak
        try:
            seconds, answer = await api.call(
                "GET", f"/api/v1/trials/{self.held['hold-core']['trial_id']}/metrics",
                timeout=300)
        except (RuntimeError, TimeoutError, OSError) as exc:
            self.report.add("API", name, f"FAILED: {type(exc).__name__}: {exc}"[:300])
            return
        self.report.add("API", name, f"{ms(seconds)}, {len(answer['metrics']):,} reports")

    # --- phase 6: memory, disk -------------------------------------------------------------

    def footprint(self) -> None:
        r = self.report
        rss = self.master.rss
        assert rss is not None
        rss.sample()
        before = getattr(self, "rss_before_restart", None)
        peak = max(rss.peak, before.peak if before else 0)
        if hasattr(self, "peak_before_big_read"):
            at_scale = max(self.peak_before_big_read, before.peak if before else 0)
            r.add("memory", "master RSS peak before the big trial was read whole",
                  f"{at_scale / 2**20:,.0f} MB", "≤ 500 MB", at_scale <= 500 * 2**20)
        r.add("memory", "master RSS at the end", f"{rss.last / 2**20:,.0f} MB "
              f"(with its workers {rss.tree_last / 2**20:,.0f} MB)", "≤ 500 MB",
              rss.last <= 500 * 2**20)
        r.add("memory", "master RSS peak (both runs of the master)",
              f"{peak / 2**20:,.0f} MB (with workers {rss.tree_peak / 2**20:,.0f} MB)",
              "≤ 500 MB", peak <= 500 * 2**20)
        stalls = [float(m) for log in sorted(self.tmp.glob("serve-*.log"))
                  for m in re.findall(r"the master was stalled for ([\d.]+) s", log.read_text())]
        r.add("memory", "event-loop stalls the master logged (count, longest, total)",
              f"{len(stalls)}, {max(stalls, default=0):.1f} s, {sum(stalls):.0f} s")
        sizes = self.master.db_bytes()
        r.add("memory", "database size",
              ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in sizes.items()))

    async def run(self) -> None:
        print(f"[1] master on {self.master.url}, {self.sizes.agents} simulated agents", flush=True)
        await asyncio.to_thread(self.start)
        await self.start_agents()
        api = Api(self.master.url, self.user_token)
        try:
            await self.create(api)
            await self.kill_some(api)
        finally:
            await api.close()
        await self.seed_metrics()
        api = Api(self.master.url, self.user_token)
        try:
            await self.stream(api)
            await self.ingest(api)
            await self.big_trial(api)
        finally:
            await api.close()
        self.footprint()


def summarise_profile(path: Path, report: Report) -> None:
    """The master's cProfile: the top functions by own and by cumulative time, as text; the
    scheduling pass's count and mean time into the report."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out).strip_dirs()
    for (file, _, func), row in stats.stats.items():  # type: ignore[attr-defined]
        if file == "scheduling.py" and func == "once" and row[1]:
            report.add("scheduling", f"scheduling pass (Scheduling.once), master run "
                       f"{path.suffix[1:]}, under cProfile: passes, mean",
                       f"{row[1]:,}, {row[3] / row[1] * 1000:.1f} ms")
    for key in ("tottime", "cumulative"):
        stats.sort_stats(key).print_stats(30)
    Path(f"{path}.txt").write_text(out.getvalue())
    print(f"master profile: {path}.txt")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="every size times F, in (0, 1] (default 1: the issue's sizes; 0.1 runs "
                   "in a few minutes)")
    p.add_argument("--quick", action="store_true", help="the same as --scale 0.05")
    for name, value in vars(Sizes()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=None,
                       help=f"(default {value:,} at --scale 1)" if isinstance(value, int)
                       else f"(default {value})")
    p.add_argument("--create-budget", type=float, default=1200.0, metavar="SECONDS",
                   help="stop creating experiments after this long (default 1200): a master "
                   "that cannot reach the size is reported, and the run goes on at its size")
    p.add_argument("--no-mlflow", action="store_true", help="skip the MLflow comparison")
    p.add_argument("--profile-master", type=Path, metavar="PREFIX",
                   help="run the master under cProfile, writing PREFIX.1 and PREFIX.2")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--out", type=Path, help="also write the report to this file")
    return p


def sizes_of(args: argparse.Namespace) -> Sizes:
    """The sizes of a run: `--scale` (or `--quick`), then each size given on its own."""
    base = Sizes.scaled(0.05 if args.quick else args.scale)
    return Sizes(**{k: getattr(args, k) if getattr(args, k) is not None else v
                    for k, v in vars(base).items()})


def main() -> None:
    args = parser().parse_args()
    try:
        sizes = sizes_of(args)
    except ValueError as exc:
        sys.exit(str(exc))
    tmp = Path(tempfile.mkdtemp(prefix="dettui-scale-"))
    bench = Bench(sizes, args, tmp)
    t0 = time.perf_counter()
    load = os.getloadavg()
    try:
        asyncio.run(bench.run())
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything this run started", file=sys.stderr)
    except Exception as exc:
        bench.report.note(f"the run stopped: {type(exc).__name__}: {exc}")
        raise
    finally:
        bench.master.stop()
        bench.procs.stop_all()
        if args.profile_master:
            for path in sorted(args.profile_master.parent.glob(args.profile_master.name + ".*")):
                if path.suffix != ".txt":
                    summarise_profile(path, bench.report)
        bench.report.note(f"command: {' '.join(['bench/scale.py', *sys.argv[1:]])}; "
                          f"{time.perf_counter() - t0:.0f} s; load average at the start "
                          f"{load[0]:.2f}, at the end {os.getloadavg()[0]:.2f} "
                          f"({os.cpu_count()} cores)")
        if bench.report.rows:
            print("\n" + bench.report.text())
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(bench.report.text() + "\n")
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
