"""A trial log of 1,000,000 lines opened in the dashboard: the time from opening the logs screen
to its last line on screen, paged (the logs screen: the last page, `limit` + `orderBy` desc,
then the follower from its last id) against the whole log streamed from its first line (how
the screen read logs before issue 33: `GET .../logs?follow=true`, which sends every line before
the newest; timed here up to the last line read, before any drawing, so it is the old way's
floor).

    .venv/bin/python bench/logs_open.py [--lines 1000000] [--rounds 5]

The master runs in-process on 127.0.0.1 with SQLite in a temporary state dir, sharing its event
loop with the headless dashboard (200x50), as `dettui` embeds it. The lines (`step i: loss x`,
rank i % 2, a WARNING every 1,000th) are stored through the store, 50,000 at a time. Wall clock
(`time.perf_counter`) and the process's CPU time (`time.process_time`: the dashboard's and
the master's, the fair figure on a busy machine), from `push_screen(LogsScreen(1))` to the
first check (every 2 ms) that finds the log's last line drawn in the view's rows.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from dettui.client import Client  # noqa: E402
from dettui.commands.dashboard import Dashboard  # noqa: E402
from dettui.master.app import create_app  # noqa: E402
from dettui.master.http import appkeys  # noqa: E402
from dettui.master.settings import MasterSettings  # noqa: E402
from dettui.master.store import logs as log_store  # noqa: E402
from dettui.screens.logs import LogsScreen  # noqa: E402

CONFIG = """
name: logs-bench
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
hyperparameters: {lr: 0.1}
"""


class Bench(Dashboard):
    def __init__(self, url: str, token: str) -> None:
        super().__init__(url, Path("/nonexistent"))
        self.token = token

    async def connect(self) -> Any:
        return Client(self.master, self.token)


async def setup(http: TestClient, lines: int) -> str:
    resp = await http.post("/api/v1/auth/login", data='{"username":"determined","password":""}')
    token = str((await resp.json())["token"])
    files = [{"path": "train.py", "type": 48, "mtime": "1700000000", "mode": 33188, "uid": 0,
              "gid": 0, "content": base64.b64encode(b"print('hi')\n").decode()}]
    resp = await http.post("/api/v1/experiments", json={
        "config": CONFIG, "modelDefinition": files, "activate": True},
        headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200, await resp.text()
    run = http.server.app[appkeys.CLUSTER].dispatcher.run
    started = time.perf_counter()
    for at in range(0, lines, 50_000):
        await run(log_store.insert, [
            {"trial_id": 1, "task_id": "t", "rank_id": i % 2, "stdtype": "stdout",
             "source": "task", "timestamp": 1_790_000_000 + i / 1000,
             "level": "WARNING" if i % 1000 == 999 else "INFO",
             "log": f"step {i}: loss {1 / (i + 1):.6f}\n"}
            for i in range(at, min(at + 50_000, lines))])
    print(f"stored {lines:,} lines in {time.perf_counter() - started:.1f} s", flush=True)
    return token


async def open_paged(app: Bench, last: str) -> tuple[float, float]:
    """(wall clock, CPU of the process: dashboard and master) to the last line shown."""
    started, cpu = time.perf_counter(), time.process_time()
    await app.push_screen(LogsScreen(1))
    screen = app.screen
    assert isinstance(screen, LogsScreen)
    view = screen.log_widget
    while not any(last in "".join(s.text for s in view.render_line(y))
                  for y in range(view.size.height)):
        if time.perf_counter() - started > 120:
            raise TimeoutError("the last line never showed")
        await asyncio.sleep(0.002)
    took = time.perf_counter() - started, time.process_time() - cpu
    app.pop_screen()
    await asyncio.sleep(0.2)
    return took


async def full_stream(url: str, token: str, lines: int) -> float:
    async with Client(url, token) as client:
        started, cpu = time.perf_counter(), time.process_time()
        read = 0
        async for _ in client.trial_logs(1, follow=False):
            read += 1
        took = time.perf_counter() - started, time.process_time() - cpu
    assert read == lines, read
    return took


async def main(lines: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = TestServer(create_app(MasterSettings(state_dir=Path(tmp) / "state", port=0)),
                            host="127.0.0.1")
        http = TestClient(server)
        await http.start_server()
        try:
            token = await setup(http, lines)
            url = str(server.make_url("")).rstrip("/")
            last = f"step {lines - 1}: loss"
            app = Bench(url, token)
            paged = []
            async with app.run_test(size=(200, 50)) as pilot:
                await pilot.pause(0.5)
                for _ in range(rounds):
                    paged.append(await open_paged(app, last))
            streamed = await full_stream(url, token, lines)
        finally:
            await http.close()
    wall = statistics.median(p[0] for p in paged)
    cpu = statistics.median(p[1] for p in paged)
    print(f"\n{lines:,}-line trial log, open to the last line shown (200x50; paged: median "
          f"of {rounds} rounds, best {min(p[0] for p in paged) * 1000:,.0f} ms)")
    print(f"{'':<30}{'wall clock':>14}{'CPU':>14}")
    print(f"{'paged (logs screen)':<30}{wall * 1000:>11,.0f} ms{cpu * 1000:>11,.0f} ms")
    print(f"{'full stream (old read)':<30}{streamed[0] * 1000:>11,.0f} ms"
          f"{streamed[1] * 1000:>11,.0f} ms")
    print(f"{'ratio (full stream / paged)':<30}{streamed[0] / wall:>13,.0f}x"
          f"{streamed[1] / cpu:>13,.0f}x")

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.lines, args.rounds))
