"""The processes `bench/scale.py` starts, and their cleanup on every exit path.

Each child gets its own session (`start_new_session=True`), so that ending it also ends what it
started (the master's worker processes, MLflow's server workers). `Processes.stop_all` runs in
`scale.py`'s `finally`, at interpreter exit and on SIGTERM/SIGHUP, and only signals the process
groups of children this benchmark started itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


class Processes:
    """Every child process of this run, ended together (SIGTERM, then SIGKILL)."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[Any]] = []
        atexit.register(self.stop_all)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(args, start_new_session=True, **kwargs)
        self.children.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[Any], grace: float = 20.0) -> int | None:
        """End one child and its process group; its exit code."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of its group (workers)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc in self.children:
            self.children.remove(proc)
        return proc.returncode

    def stop_all(self) -> None:
        for proc in reversed(list(self.children)):
            self.stop(proc, grace=5.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _drain(stream: IO[str], sink: list[str]) -> None:
    for line in stream:
        sink.append(line)
        del sink[:-200]


@dataclass
class Master:
    """A real `dettui serve --no-agent` on 127.0.0.1 with its own state and config dirs."""

    procs: Processes
    state_dir: Path
    config_dir: Path
    port: int
    agent_timeout: float = 900.0
    profile: Path | None = None  # run it under cProfile, written here when it stops
    proc: subprocess.Popen[str] | None = None
    rss: RssWatch | None = None
    out: list[str] = field(default_factory=list)
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(DETTUI_CONFIG_DIR=str(self.config_dir), DET_MASTER=self.url,
                   DETTUI_LOG_LEVEL="WARNING")
        env.pop("DET_USER", None)
        env.pop("DET_PASS", None)
        return env

    def start(self) -> float:
        """Start it and wait until it answers; the seconds that took."""
        self.starts += 1
        log = open(self.state_dir.parent / f"serve-{self.starts}.log", "w")  # noqa: SIM115
        runner = [sys.executable, "-m", "dettui.cli"]
        if self.profile is not None:  # written when it stops (SIGTERM ends it cleanly)
            runner[1:1] = ["-m", "cProfile", "-o", f"{self.profile}.{self.starts}"]
        t0 = time.perf_counter()
        self.proc = self.procs.popen(
            [*runner, "serve", "--port", str(self.port), "--host", HOST, "--no-agent",
             "--state-dir", str(self.state_dir), "--agent-timeout", str(self.agent_timeout)],
            stdout=subprocess.PIPE, stderr=log, text=True, env=self.env(), cwd=REPO)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if re.search(r"listening on (http://\S+)", line):
                break
        else:
            raise RuntimeError(f"dettui serve exited {self.proc.wait()}: see {log.name}")
        threading.Thread(target=_drain, args=(self.proc.stdout, self.out), daemon=True).start()
        self.rss = RssWatch(self.proc.pid)
        return time.perf_counter() - t0

    def wait_backfill(self, timeout: float) -> float | None:
        """Seconds until the running master has computed every stale best and summary (its
        start-up backfill), read from its database; None if not within `timeout`."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            conn = sqlite3.connect(f"file:{self.state_dir / 'master.db'}?mode=ro", uri=True,
                                   timeout=30)
            try:
                left = conn.execute(
                    "SELECT EXISTS(SELECT 1 FROM experiments WHERE best_stale=1) OR "
                    "EXISTS(SELECT 1 FROM trials WHERE summary_stale=1)").fetchone()[0]
            finally:
                conn.close()
            if not left:
                return time.perf_counter() - t0
            time.sleep(1.0)
        return None

    def stop(self) -> None:
        if self.proc is not None:
            if self.rss is not None:
                self.rss.stop()
            code = self.procs.stop(self.proc, grace=60.0)
            if code not in (0, -signal.SIGTERM, None):
                print(f"  (dettui serve exited {code})", file=sys.stderr)
            self.proc = None

    def db_bytes(self) -> dict[str, int]:
        db = self.state_dir / "master.db"
        return {p.name: p.stat().st_size for p in (db, db.with_name("master.db-wal"))
                if p.exists()}

    def call(self, method: str, path: str, body: object = None, token: str = "") -> Any:
        """A blocking API call (set-up only; the measurements use aiohttp)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read() or b"{}")

    def login(self, user: str) -> str:
        return str(self.call("POST", "/api/v1/auth/login",
                             {"username": user, "password": ""})["token"])


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU time (user + system, seconds) used so far by process `pid` itself, and by it with
    its live children (the master's worker processes); (0, 0) if it is gone."""
    try:
        proc = psutil.Process(pid)
        own = sum(proc.cpu_times()[:2])
        kids = 0.0
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                kids += sum(child.cpu_times()[:2])
    except psutil.Error:
        return 0.0, 0.0
    return own, own + kids


class RssWatch:
    """The master's resident memory, sampled every 0.5 s in a thread: peak and latest, of the
    serve process itself and of its whole tree (worker processes)."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = self.last = self.tree_peak = self.tree_last = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        try:
            own = self.proc.memory_info().rss
            tree = own + sum(c.memory_info().rss for c in self.proc.children(recursive=True))
        except psutil.Error:
            return
        self.last, self.tree_last = own, tree
        self.peak, self.tree_peak = max(self.peak, own), max(self.tree_peak, tree)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def stop(self) -> None:
        self.sample()
        self._stop.set()


@dataclass
class Mlflow:
    """MLflow's tracking server (SQLite backend store) from its own venv, on 127.0.0.1."""

    procs: Processes
    python: Path
    workdir: Path
    port: int
    proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 180.0) -> str:
        """Start it, wait for /health; its version."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "mlflow.log", "w")  # noqa: SIM115 - closed with the process
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        self.proc = self.procs.popen(
            [str(self.python), "-m", "mlflow", "server", "--host", HOST, "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
             "--default-artifact-root", str(self.workdir / "artifacts")],
            stdout=log, stderr=subprocess.STDOUT, text=True, cwd=self.workdir, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.workdir / 'mlflow.log')}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/health",
                                                                     timeout=2):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("mlflow server did not answer /health in time")
        out = subprocess.run([str(self.python), "-c", "import mlflow; print(mlflow.__version__)"],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def stop(self) -> None:
        if self.proc is not None:
            self.procs.stop(self.proc, grace=10.0)
            self.proc = None


class Lines:
    """A child's stdout, one JSON object per line, read by a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.items: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.items.append(json.loads(line))

    def of(self, event: str) -> list[dict[str, Any]]:
        return [i for i in self.items if i.get("event") == event]

    async def wait(self, event: str, count: int = 1, timeout: float = 300) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.of(event)) < count:
            if self.proc.poll() is not None:
                raise RuntimeError(f"child exited {self.proc.returncode} waiting for {event}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {count} {event!r} events")
            await asyncio.sleep(0.05)
        return self.of(event)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
