"""Dashboards attached over the push stream, for `bench/scale.py`: D WebSocket clients in one
asyncio process, each subscribed to what the dashboard's screens follow: the first 500 jobs
(`jobs?limit=500`), the newest 500 experiments (`experiments?limit=500`), `agents` and
`experiment:<id>` (its own experiment).

    python bench/_scale_dash.py URL TOKEN EXP_ID [EXP_ID ...]

stdout, one JSON object per line: `{"event": "ready", "snapshots": n, "seconds": s}` once every
client has its four snapshots; then for each benchmark marker (`scale-mark-N`) seen in an
`experiments?limit=500` diff, `{"event": "mark", "mark": N, "client": i, "t": time.monotonic()}`
(CLOCK_MONOTONIC is the machine's, so the benchmark compares it with its own clock). Frames are
not decoded unless they carry a marker: the clients cost what receiving costs, so their own
parsing does not add to the latency measured. Ends when stdin closes; prints
`{"event": "done", "messages": n, "bytes": b, "disconnects": d}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from dataclasses import dataclass

import aiohttp

from dettui.screens.base import ApiScreen

MARK = re.compile(r"scale-mark-(\d+)")
WINDOW = ApiScreen.WINDOW  # what the dashboard's long lists follow: the first 500 rows


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


@dataclass
class Totals:
    messages: int = 0
    bytes: int = 0
    disconnects: int = 0


async def dashboard(index: int, url: str, token: str, exp_id: int, ready: asyncio.Queue[int],
                    totals: Totals) -> None:
    topics = [f"jobs?limit={WINDOW}", f"experiments?limit={WINDOW}", "agents",
              f"experiment:{exp_id}"]
    async with aiohttp.ClientSession() as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                await follow(index, session, url, token, topics, ready, totals)
            totals.disconnects += 1
            await asyncio.sleep(0.5)


async def follow(index: int, session: aiohttp.ClientSession, url: str, token: str,
                 topics: list[str], ready: asyncio.Queue[int], totals: Totals) -> None:
    """One connection, until it ends: count the frames, report the markers."""
    snapshots = 0
    async with session.ws_connect(url + "/api/v1/stream", max_msg_size=0,
                                  headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.send_json({"subscribe": topics})
        async for msg in ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                break
            now = time.monotonic()
            text: str = msg.data
            totals.messages += 1
            totals.bytes += len(text)
            head = text[:200]
            if snapshots < len(topics) and '"kind":"snapshot"' in head:
                snapshots += 1
                if snapshots == len(topics):
                    ready.put_nowait(index)
            elif '"topic":"experiments?' in head and "scale-mark-" in text:
                for mark in set(MARK.findall(text)):
                    emit("mark", mark=int(mark), client=index, t=now)


async def main_async(url: str, token: str, exp_ids: list[int]) -> None:
    ready: asyncio.Queue[int] = asyncio.Queue()
    totals = Totals()
    t0 = time.monotonic()
    tasks = [asyncio.create_task(dashboard(i, url, token, e, ready, totals))
             for i, e in enumerate(exp_ids)]
    for _ in exp_ids:
        await ready.get()
    emit("ready", snapshots=len(exp_ids) * 4, seconds=time.monotonic() - t0,
         bytes=totals.bytes)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.readline():
        pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    emit("done", messages=totals.messages, bytes=totals.bytes, disconnects=totals.disconnects)


def main() -> None:
    url, token, *ids = sys.argv[1:]
    asyncio.run(main_async(url, token, [int(i) for i in ids]))


if __name__ == "__main__":
    main()
