"""The master killed with SIGKILL at random moments, 20 times, while pause, activate, cancel and
kill requests and trial exits are in flight (an agent of its own keeps running trials through
every restart). Afterwards a final cancel ends every experiment, the store holds no live
allocation and no stuck trial, and no process of this test's trials is left."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.conftest import Served, marked_processes
from tests.e2e.test_agent import start_agent
from tests.e2e.test_single import write_ctx

pytestmark = [pytest.mark.slow, pytest.mark.both_ways]  # trials forked and fresh (conftest)
ROUNDS = 20
TERMINAL = {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR"}

# A trial of about 3 s that reports, checkpoints, resumes, honours preemption and, for some
# hyperparameters, fails (an exit the master must handle while it may be dying).
TRIAL = """
import sys, time
from dettui import core
with core.init() as ctx:
    hp = ctx.info.trial.hparams
    step = 0
    if ctx.info.latest_checkpoint:
        with ctx.checkpoint.restore_path(ctx.info.latest_checkpoint) as path:
            step = int((path / "step").read_text())
    while step < 30:
        time.sleep(0.1)
        step += 1
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        if step % 10 == 0 or ctx.preempt.should_preempt():
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                (path / "step").write_text(str(step))
            if ctx.preempt.should_preempt():
                sys.exit(0)
        if hp["fail_at"] == step:
            sys.exit(3)
    ctx.train.report_validation_metrics(steps_completed=step, metrics={"loss": 1 / step})
"""
CONFIG = """
name: loop-{n}
entrypoint: python3 trial.py
searcher: {{name: random, metric: loss, max_trials: 2, max_length: 30}}
hyperparameters: {{fail_at: {{type: categorical, vals: [0, 0, 7]}}}}
max_restarts: 2
"""


def request(url: str, token: str, method: str, path: str, body: object = None) -> object:
    """One API call; None when the master is down or refuses (it may be dying)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return None


class Controller(threading.Thread):
    """Pauses, activates, cancels and kills experiments at random until told to stop."""

    def __init__(self, url: str, token: str, ids: list[int], rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.ids, self.rng = url, token, ids, rng
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stop.is_set():
            action = self.rng.choices(["pause", "activate", "cancel", "kill"], [4, 4, 1, 1])[0]
            request(self.url, self.token, "POST",
                    f"/api/v1/experiments/{self.rng.choice(self.ids)}/{action}")
            self.sent += 1
            self.stop.wait(self.rng.uniform(0.02, 0.2))


def states(s: Served, token: str) -> dict[int, str]:
    body = request(s.url, token, "GET", "/api/v1/experiments?limit=1000")
    assert isinstance(body, dict), "the master did not answer"
    return {e["id"]: e["state"] for e in body["experiments"]}


def mine() -> list[int]:
    """Live processes of this test's trials (marked with this run and its work dir)."""
    out = []
    for pid in marked_processes():
        try:
            if "sigkill-loop-work" in psutil.Process(pid).environ().get("DET_WORKDIR", ""):
                out.append(pid)
        except psutil.Error:
            continue
    return out


@pytest.mark.timeout(600)
def test_twenty_master_kills_amid_control_requests_and_exits(headless: Served,
                                                            tmp_path: Path) -> None:
    rng = random.Random(20261125)
    cfg, ctx = write_ctx(tmp_path, CONFIG.format(n=0), {"trial.py": TRIAL})
    agent = start_agent(headless, tmp_path, "--slots", "2", "--id", "looper",
                        "--work-dir", str(tmp_path / "sigkill-loop-work"))
    port = int(headless.url.rsplit(":", 1)[1])
    ids: list[int] = []
    sent = 0
    try:
        headless.wait_for_agents(1)
        token = headless.token()
        for n in range(ROUNDS):
            live = [i for i, st in states(headless, token).items() if st not in TERMINAL]
            if len(live) < 3:  # keep work in flight
                cfg.write_text(CONFIG.format(n=n))
                out = headless.cli("e", "create", str(cfg), str(ctx)).stdout
                ids.append(int(out.split("Created experiment ")[1].split()[0]))
            controller = Controller(headless.url, token, ids, rng)
            controller.start()
            time.sleep(rng.uniform(0.3, 2.0))
            headless.kill9()
            controller.stop.set()
            controller.join(10)
            sent += controller.sent
            headless.start(port=port)
            headless.wait_for_agents(1)
        for exp_id in ids:
            request(headless.url, token, "POST", f"/api/v1/experiments/{exp_id}/cancel")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            left = {i: st for i, st in states(headless, token).items() if st not in TERMINAL}
            if not left:
                break
            time.sleep(0.5)
        assert not left, f"experiments not ended after the final cancel: {left}\n" + (
            headless.log_path.read_text()[-4000:] if headless.log_path else "")
        deadline = time.monotonic() + 15
        while mine() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not mine(), "trial processes outlived their experiments"
    finally:
        agent.terminate()
        agent.wait(30)
    db = sqlite3.connect(headless.state_dir / "master.db")
    live_allocs = db.execute("SELECT id, state FROM allocations WHERE state != 'EXITED'")
    assert not live_allocs.fetchall()
    failed = db.execute("SELECT id FROM allocations WHERE exit_reason = 'spawn_failed'")
    assert not failed.fetchall(), "a master restart made a start fail"
    stuck = db.execute("SELECT id, state FROM trials WHERE state NOT IN "
                       "('STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR')").fetchall()
    assert not stuck, stuck
    print(f"\nsigkill loop: {ROUNDS} master kills, {len(ids)} experiments, {sent} control "
          f"requests sent; all ended after the final cancel")
