"""Shared fixtures: a real `dettui serve` on 127.0.0.1 with a port picked by the OS."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.pg_cluster import PgCluster
from tests.pg_cluster import missing as pg_missing

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_ctx"


def _let_trial_users_through(path: Path) -> None:
    """Trials run as unprivileged users: where this checkout lies under a directory they
    cannot pass (a clone in a 0700 temp dir), let them pass (x, not list), as a lab admin
    puts the venv where its users reach it. The agent binds its own venv in anyway; this is
    for what tests name besides (.venv-det's Python on a trial's PATH)."""
    for d in (path, *path.parents):
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            d.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


if os.geteuid() == 0:
    _let_trial_users_through(REPO)
# Every process this test run starts carries this mark (agents pass it down to trials), so that
# tests look at their own processes only: two suites on one machine never see each other's.
TEST_MARK = "DETTUI_TEST_RUN"
# One mark per pytest process: each xdist worker (`make test` runs two) looks at its own only.
_SUITE = os.environ.get(TEST_MARK) or uuid.uuid4().hex
RUN = f"{_SUITE}-{os.environ['PYTEST_XDIST_WORKER']}" if "PYTEST_XDIST_WORKER" in os.environ \
    else _SUITE
os.environ[TEST_MARK] = RUN


def marked_processes() -> list[int]:
    """Live processes of allocations started by this test run."""
    out = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if ("DETTUI_ALLOCATION_ID" in env and env.get(TEST_MARK) == RUN
                    and proc.status() != psutil.STATUS_ZOMBIE):
                out.append(proc.pid)
        except psutil.Error:
            continue
    return out


@dataclass
class Served:
    """A `dettui serve` subprocess and how to talk to it."""

    state_dir: Path
    config_dir: Path
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    url: str = ""
    log_path: Path | None = None
    # The password of `admin` and `determined` (a master beyond loopback must have one), and a
    # prefix the master and CLI commands run under (e.g. `ip netns exec NAME`).
    password: str = ""
    prefix: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DETTUI_CONFIG_DIR"] = str(self.config_dir)
        env["DET_MASTER"] = self.url
        env.pop("DET_USER", None)
        env.pop("DET_PASS", None)
        if self.password:
            env["DET_PASS"] = self.password
        env["DETTUI_LOG_LEVEL"] = "INFO"
        # tables fit $COLUMNS (pytest-xdist's workers have COLUMNS=80): a test reads them whole
        env.pop("COLUMNS", None)
        return env

    def start(self, port: int = 0) -> None:
        self.log_path = self.state_dir.parent / f"serve-{int(time.time() * 1000)}.log"
        STARTED.append(self)
        log = open(self.log_path, "w")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "dettui.cli", "serve", "--port", str(port),
             "--state-dir", str(self.state_dir), *self.extra],
            stdout=subprocess.PIPE, stderr=log, text=True, env=self.env(),
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"dettui serve exited: {self.log_path.read_text()[-3000:]}")
        else:
            raise RuntimeError("dettui serve did not start in 30 s")
        self.wait_for_agents(1 if "--no-agent" not in self.extra else 0)

    def wait_for_agents(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if n == 0 or len(self.api("GET", "/api/v1/agents")["agents"]) >= n:
                return
            time.sleep(0.1)
        raise AssertionError(f"fewer than {n} agents registered")

    def urlopen(self, req: urllib.request.Request, timeout: float) -> bytes:
        """One request to the master: the body of its answer (HTTP errors raise)."""
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return bytes(resp.read())

    def token(self, username: str = "determined") -> str:
        body = json.dumps({"username": username, "password": self.password}).encode()
        req = urllib.request.Request(self.url + "/api/v1/auth/login", data=body, method="POST")
        return str(json.loads(self.urlopen(req, 10))["token"])

    def api(self, method: str, path: str, body: object = None, *,
            token: str | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token or self.token()}"})
        return dict(json.loads(self.urlopen(req, 30)))

    def admin_token(self) -> str:
        return self.token("admin")

    def agent_token(self, description: str = "test agent") -> str:
        """A new agent credential, issued by the admin."""
        return str(self.api("POST", "/api/v1/agent-credentials", {"description": description},
                            token=self.admin_token())["token"])

    def cli(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([*self.prefix, sys.executable, "-m", "dettui.cli", "-m", self.url,
                              *args],
                             capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and res.returncode != 0:
            raise AssertionError(f"dettui {' '.join(args)} failed ({res.returncode}):\n"
                                 f"{res.stdout}\n{res.stderr}")
        return res

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def wait_experiment(self, exp_id: int, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exp = self.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"]
            if exp["state"] in ("STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR"):
                return exp
            time.sleep(0.2)
        raise AssertionError(f"experiment {exp_id} did not end in {timeout} s:\n"
                             f"{self.log_path.read_text()[-3000:] if self.log_path else ''}")


STARTED: list[Served] = []  # every master this test run started, in order (tests/compat reads)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "2"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def headless(tmp_path: Path) -> Iterator[Served]:
    """`dettui serve --no-agent`: agents are started by the test."""
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--no-agent"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgCluster]:
    """A throwaway PostgreSQL for the whole session (tests/pg_cluster.py)."""
    why = pg_missing()
    if why is not None:
        pytest.skip(why)
    cluster = PgCluster(tmp_path_factory.mktemp("postgres"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """The URL of a database of this test's own, with the store's schema."""
    name = pg_cluster.take_database()
    try:
        yield pg_cluster.url(name)
    finally:
        pg_cluster.give_back(name)


def make_unix_user(name: str) -> None:
    """A throwaway system user (and its group) for a test, as root. Two suites on one machine
    may add users at once: useradd's lock on /etc/passwd is waited out."""
    for attempt in range(40):
        res = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                              "--shell", "/usr/sbin/nologin", name], capture_output=True,
                             text=True)
        if res.returncode == 0:
            return
        if "lock" not in res.stderr.lower() or attempt == 39:
            raise RuntimeError(f"useradd {name} failed: {res.stderr.strip()}")
        time.sleep(0.25)


def remove_unix_user(name: str) -> None:
    for _ in range(40):
        res = subprocess.run(["userdel", name], capture_output=True, text=True)
        if res.returncode == 0 or "lock" not in res.stderr.lower():
            return
        time.sleep(0.25)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After the run, every test that did not run, by node id, under the reason it gave, so
    that a run without PostgreSQL, Slurm or network namespaces says which legs it left out.
    With xdist this runs in the controller, which holds every worker's reports."""
    by_reason: dict[str, list[str]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr  # (path, line, "Skipped: why") for a skip
        reason = str(longrepr[2] if isinstance(longrepr, tuple | list) else longrepr)
        by_reason.setdefault(reason.removeprefix("Skipped: "), []).append(report.nodeid)
    if not by_reason:
        return
    terminalreporter.write_sep("=", f"not run: {sum(map(len, by_reason.values()))} skipped")
    for reason, nodeids in sorted(by_reason.items()):
        terminalreporter.write_line(f"{reason} ({len(nodeids)}):")
        for nodeid in sorted(nodeids):
            terminalreporter.write_line(f"  {nodeid}")


# --- trials started both ways (issue 34) ---------------------------------------------------
# A test marked `both_ways` runs twice, its id ending in [fork] or [fresh]: with
# DETTUI_TRIAL_START set so that every agent it starts (Served's local agent, start_agent, an
# in-process Agent) forks Python trials from its fork server, or starts each fresh.
TRIAL_STARTS = ("fork", "fresh")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_ways: run the test with trials forked by the fork server and fresh "
                   "(DETTUI_TRIAL_START=fork|fresh), its id saying which")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_ways") is not None \
            and "trial_start" in metafunc.fixturenames:
        metafunc.parametrize("trial_start", TRIAL_STARTS, indirect=True)


@pytest.fixture(autouse=True)
def trial_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The way this test's agents start trials ("fork" or "fresh") when it is marked
    `both_ways`, set before any master or agent of the test starts (an autouse fixture comes
    first in its scope); None, and the environment untouched, for any other test."""
    way = getattr(request, "param", None)
    if way is not None:
        monkeypatch.setenv("DETTUI_TRIAL_START", str(way))
    return way


# What every process a test starts inherits of the test's own process: an ignored or blocked
# SIGINT would make each CLI, master and dashboard it starts deaf to Ctrl-C (the tests of Ctrl-C
# then time out, far from the test that changed it). Put back after each test, and said.
_SIGNALS_CHANGED = Path(os.environ.get("TMPDIR", "/tmp")) / f"dettui-signals-{RUN}.txt"


def _sigint_back(where: str) -> None:
    import signal

    handler = signal.getsignal(signal.SIGINT)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if handler is signal.SIG_IGN or signal.SIGINT in blocked:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        how = "ignored" if handler is signal.SIG_IGN else "blocked"
        with open(_SIGNALS_CHANGED, "a") as f:
            f.write(f"{where}: SIGINT {how}\n")


@pytest.fixture(autouse=True)
def _sigint_as_it_was(request: pytest.FixtureRequest) -> Iterator[None]:
    _sigint_back(f"before {request.node.nodeid}")
    yield
    _sigint_back(f"after {request.node.nodeid}")
