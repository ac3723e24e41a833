"""Logs exactly once: a trial prints 200,000 lines while the master is killed with SIGKILL twice
and restarted; every line arrives, none twice."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import Served
from tests.e2e.test_agent import start_agent
from tests.e2e.test_single import write_ctx

pytestmark = pytest.mark.slow
LINES = 200_000


def trial_lines(s: Served, trial_id: int) -> list[str]:
    query = urllib.parse.urlencode({"limit": 0})
    req = urllib.request.Request(f"{s.url}/api/v1/trials/{trial_id}/logs?{query}",
                                 headers={"Authorization": f"Bearer {s.token()}"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return [json.loads(raw)["result"]["log"] for raw in resp if raw.strip()]


def test_a_flood_survives_two_master_kills(headless: Served, tmp_path: Path) -> None:
    agent = start_agent(headless, tmp_path, "--slots", "1", "--id", "flood-agent")
    try:
        headless.wait_for_agents(1)
        cfg, ctx = write_ctx(tmp_path, """
            name: flood
            entrypoint: python3 flood.py
            searcher: {name: single, metric: x, max_length: 1}
            """, {"flood.py": f"""
            import time
            step = {LINES // 8}
            for chunk in range(8):
                lines = (f"line {{i}}" for i in range(chunk * step, (chunk + 1) * step))
                print("\\n".join(lines), flush=True)
                time.sleep(0.4)
            time.sleep(2)
            """})
        headless.cli("e", "create", str(cfg), str(ctx))
        port = int(headless.url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            trials = headless.api("GET", "/api/v1/experiments/1/trials")["trials"]
            if trials and trials[0]["state"] == "STATE_RUNNING":
                break
            time.sleep(0.1)
        for pause in (0.8, 1.2):  # mid-flood, twice
            time.sleep(pause)
            headless.kill9()
            headless.start(port=port)
        exp = headless.wait_experiment(1, timeout=180)
        assert exp["state"] == "STATE_COMPLETED", exp
        deadline = time.monotonic() + 60
        got: list[str] = []
        while time.monotonic() < deadline:
            got = [ln for ln in trial_lines(headless, 1) if ln.startswith("line ")]
            if len(got) >= LINES:
                break
            time.sleep(1)
        assert len(got) == LINES, f"{len(got)} lines of {LINES}, {len(set(got))} distinct"
        assert set(got) == {f"line {i}\n" for i in range(LINES)}
    finally:
        agent.terminate()
        agent.wait(30)
