"""A state dir's lock file planted by someone else (review of issue 31, attacker finding 3, and
5): another local user writes `master.lock` in a shared dir, naming a server of theirs, or a
pid of mine. The CLI believes a lock only when it and its dir are mine alone and its URL is of
this host, says in one line which one it ignored and why, never sends a password there, never
signals a pid that is not a dettui process of mine; a master that answers without the keys a
master sends, or with escape codes in its headers or errors, is one clean escaped line.

Runs as root (chown to nobody); the default master address is a port nobody listens on."""

from __future__ import annotations

import fcntl
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to nobody)")]

NOBODY = 65534
RUN = ("import sys, dettui.client as c; c.DEFAULT_MASTER = sys.argv[1]; "
       "from dettui import cli; sys.exit(cli.main(sys.argv[2:]))")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dettui(tmp_path: Path, *args: str, default: str | None = None,
           extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DET_MASTER", "DET_USER",
                                                            "DET_PASS")}
    env["DETTUI_CONFIG_DIR"] = str(tmp_path / "config")
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-P", "-c", RUN,
                           default or f"http://127.0.0.1:{free_port()}", *args],
                          capture_output=True, text=True, timeout=60, env=env,
                          stdin=subprocess.DEVNULL)


class _Fake(http.server.BaseHTTPRequestHandler):
    """A server posing as a master: logs in anyone, answers every other call with `{}` (no
    `experiments` key), records every request and body."""

    seen: list[str]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace")
        self.seen.append(f"{self.command} {self.path} {body}")
        if self.path.startswith("/api/v1/auth/login"):
            data = {"token": "stolen"}
        elif self.path.startswith("/api/v1/me"):
            data = {"user": {"username": "alice", "id": 2}}
        elif self.path.startswith("/api/v1/users"):  # an error with escape codes in it
            self._send(400, "application/json",
                       json.dumps({"message": "bad \x1b[2J\x1b]0;pwned\x07 user"}))
            return
        elif self.path.startswith(("/api/v1/agents", "/api/v1/tasks")):  # a web page, its type
            # with escapes
            self._send(404, "text/html\x1b[2J\x1b]0;owned\x07", "<title>x</title>")
            return
        else:
            data = {}
        self._send(200, "application/json", json.dumps(data))

    def _send(self, status: int, kind: str, text: str) -> None:
        raw = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Fake,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def plant(state: Path, url: str, pid: int, *, dir_owner: int = 0, file_owner: int = 0,
          file_mode: int = 0o600) -> int:
    """A lock file naming `url` and `pid`, held (as a running master holds it); the fd."""
    state.mkdir(mode=0o755 if dir_owner else 0o700, exist_ok=True)
    os.chown(state, dir_owner, dir_owner)
    lock = state / "master.lock"
    lock.write_text(json.dumps({"url": url, "pid": pid, "mode": "serve"}))
    os.chown(lock, file_owner, file_owner)
    lock.chmod(file_mode)
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


@pytest.mark.parametrize(("dir_owner", "file_owner", "mode", "why"), [
    (NOBODY, NOBODY, 0o644, "the directory {state} belongs to uid 65534"),
    (0, NOBODY, 0o644, "the file belongs to uid 65534"),
    (0, 0, 0o666, "the file is writable by others (mode 0666)"),
], ids=["their-dir", "their-file", "world-writable"])
def test_a_planted_lock_gets_no_password(tmp_path: Path, fake: tuple[str, list[str]],
                                         dir_owner: int, file_owner: int, mode: int,
                                         why: str) -> None:
    url, seen = fake
    state = tmp_path / "shared-state"
    fd = plant(state, url, os.getpid(), dir_owner=dir_owner, file_owner=file_owner,
               file_mode=mode)
    try:
        login = dettui(tmp_path, "--state-dir", str(state), "user", "login", "alice",
                       "--password", "victim-secret")
        listed = dettui(tmp_path, "--state-dir", str(state), "e", "list",
                        extra_env={"DET_USER": "alice", "DET_PASS": "victim-secret"})
    finally:
        os.close(fd)
    assert seen == [], "nothing was sent to the planted URL"
    line = f"ignoring the master recorded in {state / 'master.lock'}: " + why.format(state=state)
    for res in (login, listed):
        assert res.returncode == 1, res.stderr
        assert res.stderr.splitlines()[0] == line, res.stderr
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "config" / "auth.json").exists() or \
        "stolen" not in (tmp_path / "config" / "auth.json").read_text()


@pytest.mark.parametrize(("address", "why"), [
    ("http://198.51.100.7:8080", "its address '198.51.100.7' is not of this host"),
    ("http://\x1b[2J:1", "its address is not a master URL"),
], ids=["another-host", "escape-codes"])
def test_a_lock_naming_another_host_is_ignored(tmp_path: Path, address: str, why: str) -> None:
    state = tmp_path / "state"
    fd = plant(state, address, os.getpid())
    try:
        res = dettui(tmp_path, "--state-dir", str(state), "e", "list")
    finally:
        os.close(fd)
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines()[0] == (
        f"ignoring the master recorded in {state / 'master.lock'}: {why}"), res.stderr
    assert "\x1b" not in res.stderr and "Traceback" not in res.stderr


def test_serve_stop_signals_no_pid_but_a_dettui_master_of_mine(tmp_path: Path) -> None:
    theirs = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                               "--clear-groups", "sleep", "120"])
    mine = subprocess.Popen(["sleep", "120"])
    try:
        for proc, why in ((theirs, f"process {theirs.pid} belongs to uid {NOBODY}"),
                          (mine, f"process {mine.pid} is not a dettui master")):
            state = tmp_path / f"state-{proc.pid}"
            fd = plant(state, "http://127.0.0.1:1", proc.pid)
            try:
                res = dettui(tmp_path, "serve", "--stop", "--state-dir", str(state))
            finally:
                os.close(fd)
            assert res.returncode == 1, res.stderr
            assert (f"not signalling pid {proc.pid}, named by {state / 'master.lock'}: {why}"
                    in res.stderr), res.stderr
            assert proc.poll() is None, "not signalled"
    finally:
        for proc in (theirs, mine):
            proc.kill()
            proc.wait()


def test_the_dashboards_log_is_not_written_through_a_symlink(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "victim"
    target.write_text("precious\n")
    (state / "dettui.log").symlink_to(target)
    res = dettui(tmp_path, "--state-dir", str(state), "-m", "http://127.0.0.1:1")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"cannot write the dashboard's log {state / 'dettui.log'}" in res.stderr, res.stderr
    assert target.read_text() == "precious\n"


def test_a_reply_without_the_expected_key_is_one_clean_line(
        tmp_path: Path, fake: tuple[str, list[str]]) -> None:
    url, _ = fake
    res = dettui(tmp_path, "-m", url, "e", "list")
    assert res.returncode == 1, res.stderr
    assert res.stderr == (f"Bad answer: the master at {url} answered GET /api/v1/experiments "
                          "without a list `experiments`; is it a dettui/Determined master?\n")


def test_escape_codes_from_a_master_reach_the_terminal_escaped(
        tmp_path: Path, fake: tuple[str, list[str]]) -> None:
    url, _ = fake
    error = dettui(tmp_path, "-m", url, "user", "list")
    assert error.returncode == 1, error.stderr
    assert error.stderr == "Invalid argument: bad \\x1b[2J\\x1b]0;pwned\\x07 user\n"
    page = dettui(tmp_path, "-m", url, "agent", "list")
    assert page.returncode == 1, page.stderr
    assert "\x1b" not in page.stderr and "\x07" not in page.stderr, repr(page.stderr)
    assert page.stderr.startswith(f"Not a master: {url} is not a dettui/Determined master "
                                  "(it answered GET /api/v1/"), page.stderr
    assert "with text/html[2J]0, HTTP 404" in page.stderr, page.stderr  # controls dropped
