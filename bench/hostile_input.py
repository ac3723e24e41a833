"""How a real `dettui serve` holds up under hostile and heavy input: the latency of
GET /api/v1/master (polled every 20 ms from another thread) while the master takes a 130 MB
config, a YAML alias bomb, and a legitimate 90 MB context; plus the alias bomb refused by
`yamlsafe` against yaml.safe_load + json.dumps (what storing a config did) of a smaller one
(10^6 leaves).

    .venv/bin/python bench/hostile_input.py
"""

from __future__ import annotations

import base64
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from dettui.config import yamlsafe

CONFIG = "name: bench\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def bomb(levels: int) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    names = "abcdefghij"
    for prev, name in zip(names, names[1:levels], strict=False):
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    return text


def start(state: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "dettui.cli", "serve", "--port", "0",
                             "--no-agent", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("dettui serve did not start")


def call(url: str, path: str, token: str | None, data: bytes | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url + path, data=data, headers=headers,
                                 method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


POLLER = """
import sys, time, urllib.request
url, token = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url + "/api/v1/master", headers={"Authorization": "Bearer " + token})
while True:
    t = time.perf_counter()
    urllib.request.urlopen(req, timeout=60).read()
    print(time.perf_counter() - t, flush=True)
    time.sleep(0.02)
"""


def during(url: str, token: str, body: bytes) -> tuple[int, float, list[float]]:
    """POST an experiment while another process polls GET /api/v1/master (so that this
    process's own work does not count); (status, seconds, latencies during the POST)."""
    poller = subprocess.Popen([sys.executable, "-c", POLLER, url, token],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    t = time.perf_counter()
    status, _ = call(url, "/api/v1/experiments", token, body)
    took = time.perf_counter() - t
    poller.kill()
    out, _ = poller.communicate()
    latencies = [float(x) for x in out.split()]
    return status, took, latencies[int(0.5 / 0.021):]


def row(label: str, status: int, took: float, lat: list[float], idle: float) -> None:
    head = f"{label:<34} HTTP {status}  in {took * 1000:7.0f} ms"
    if not lat:
        print(f"{head}   (over before the next poll)")
        return
    worst = max(lat)
    print(f"{head}   GET /api/v1/master during it: {len(lat):3d} answers, median "
          f"{statistics.median(lat) * 1000:5.1f} ms, max {worst * 1000:6.1f} ms "
          f"({worst / idle:5.1f}x idle median)")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(Path(tmp) / "state")
        try:
            login = json.dumps({"username": "determined", "password": ""}).encode()
            token = json.loads(call(url, "/api/v1/auth/login", None, login)[1])["token"]
            idle = []
            for _ in range(50):
                t = time.perf_counter()
                call(url, "/api/v1/master", token)
                idle.append(time.perf_counter() - t)
            idle_median = statistics.median(idle)
            print(f"idle GET /api/v1/master: median {idle_median * 1000:.1f} ms, "
                  f"max {max(idle) * 1000:.1f} ms")
            huge = CONFIG + "description: " + "x" * 130_000_000 + "\n"
            row("130 MB config", *during(url, token, json.dumps(
                {"config": huge, "modelDefinition": []}).encode()), idle_median)
            row("alias bomb (10^7 leaves, 296 B)", *during(url, token, json.dumps(
                {"config": bomb(7) + CONFIG, "modelDefinition": []}).encode()), idle_median)
            content = base64.b64encode(os.urandom(90 * 1024 * 1024)).decode()
            files = [{"path": "train.py", "type": 48, "content": content, "mtime": "1700000000",
                      "mode": 33188, "uid": 0, "gid": 0}]
            row("90 MB context (accepted)", *during(url, token, json.dumps(
                {"config": CONFIG, "modelDefinition": files, "activate": False}).encode()),
                idle_median)
        finally:
            proc.terminate()
            proc.wait(30)
    t = time.perf_counter()
    try:
        yamlsafe.load(bomb(7))
    except yamlsafe.YamlTooBig:
        refused = time.perf_counter() - t
    t = time.perf_counter()
    json.dumps(yaml.safe_load(bomb(6)))  # what storing the config as JSON did with it
    built = time.perf_counter() - t
    print(f"yamlsafe refuses the 10^7 bomb in {refused * 1000:.2f} ms; yaml.safe_load + "
          f"json.dumps of a 10^6 one took {built * 1000:.0f} ms (ratio {built / refused:,.0f}x; "
          "10x more again for 10^7)")


if __name__ == "__main__":
    main()
