"""Which master a command talks to (issue 31, item 2 and a smaller item): without -m or
$DET_MASTER, the CLI uses the master running on its state dir, and says so when the default
address belongs to another master; an explicit -m or $DET_MASTER always wins; a web server
that is not a master is named as such, never printed.

The default address (http://127.0.0.1:8080) is stood in for by a master of the test's own on
a free port (`dettui.client.DEFAULT_MASTER` set before the command runs): port 8080 may be
anyone's on a shared machine."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served

pytestmark = pytest.mark.slow

RUN = ("import sys, dettui.client as c; c.DEFAULT_MASTER = sys.argv[1]; "
       "from dettui import cli; sys.exit(cli.main(sys.argv[2:]))")


def dettui(default: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`dettui ARGS` with `default` as the default master's address."""
    return subprocess.run([sys.executable, "-c", RUN, default, *args], capture_output=True,
                          text=True, timeout=120, env=env)


def plain_env(config: Path) -> dict[str, str]:
    """A user's shell: no DET_MASTER, no DET_USER/DET_PASS."""
    env = {k: v for k, v in os.environ.items() if k not in ("DET_MASTER", "DET_USER",
                                                            "DET_PASS")}
    env["DETTUI_CONFIG_DIR"] = str(config)
    return env


@pytest.fixture
def foreign(tmp_path: Path) -> Iterator[Served]:
    """Another master, at the (stand-in) default address."""
    s = Served(tmp_path / "foreign-state", tmp_path / "foreign-config", extra=["--no-agent"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def names(s: Served) -> list[int]:
    return [e["id"] for e in s.api("GET", "/api/v1/experiments")["experiments"]]


def test_the_cli_uses_its_state_dirs_master_and_says_so(foreign: Served, headless: Served,
                                                         tmp_path: Path) -> None:
    """The scenario of the issue: the default port is another master's, this user's master
    listens elsewhere; `e create` and `e list` go to this user's master, and say which."""
    env = plain_env(tmp_path / "user-config")
    state = str(headless.state_dir)
    made = dettui(foreign.url, "--state-dir", state, "e", "create", "--paused",
                  str(SAMPLE / "single.yaml"), str(SAMPLE), env=env)
    assert made.returncode == 0, made.stderr
    assert names(headless) == [1] and names(foreign) == [], "landed on this state dir's master"
    note = (f"using the master of {state} at {headless.url} ({foreign.url} is not this state "
            f"dir's master; -m URL picks another)")
    assert made.stderr.splitlines()[0] == note, made.stderr  # first, before any warning
    listed = dettui(foreign.url, "--state-dir", state, "e", "list", "--json", env=env)
    assert [e["id"] for e in json.loads(listed.stdout)] == [1]
    assert listed.stderr.splitlines() == [note]


def test_an_explicit_master_wins_without_a_word(foreign: Served, headless: Served,
                                                tmp_path: Path) -> None:
    env = plain_env(tmp_path / "user-config")
    state = str(headless.state_dir)
    by_flag = dettui(foreign.url, "--state-dir", state, "e", "create", "--paused",
                     str(SAMPLE / "single.yaml"), str(SAMPLE), "-m", foreign.url, env=env)
    assert by_flag.returncode == 0, by_flag.stderr
    assert "using the master" not in by_flag.stderr, by_flag.stderr
    by_env = dettui(foreign.url, "--state-dir", state, "e", "list", "--json",
                    env={**env, "DET_MASTER": foreign.url})
    assert by_env.stderr == "" and len(json.loads(by_env.stdout)) == 1
    assert names(foreign) == [1] and names(headless) == []


def test_with_no_master_on_its_state_dir_the_cli_says_it_uses_the_default(
        foreign: Served, tmp_path: Path) -> None:
    """A state dir whose master has stopped: the default master is used, and named."""
    state = tmp_path / "mine"
    mine = Served(state, tmp_path / "mine-config", extra=["--no-agent"])
    mine.start()
    mine.stop()
    env = plain_env(tmp_path / "user-config")
    listed = dettui(foreign.url, "--state-dir", str(state), "e", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.splitlines() == [
        f"no master runs on {state}; using the one at {foreign.url} (-m URL picks another)"]


def test_the_state_dirs_master_on_the_default_address_is_used_quietly(headless: Served,
                                                                      tmp_path: Path) -> None:
    env = plain_env(tmp_path / "user-config")
    listed = dettui(headless.url, "--state-dir", str(headless.state_dir), "e", "list", env=env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr


class _WebPage(http.server.BaseHTTPRequestHandler):
    """A web server of another kind: an HTML page for every request (an error page, or, as
    a single-page app's server does, a 200 page for any path)."""

    status = 404

    def _page(self) -> None:
        body = (b"<!DOCTYPE html>\n<html><head><title>Welcome to\n nginx!</title></head>"
                b"<body>" + b"<p>x</p>" * 200 + b"</body></html>")
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _page

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=[404, 200], ids=["error-page", "page-for-any-path"])
def web_server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (_WebPage,), {"status": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("argv", [["e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE)],
                                  ["e", "list"]], ids=["create", "list"])
def test_a_web_server_on_the_master_url_is_named_not_printed(web_server: str, tmp_path: Path,
                                                            argv: list[str]) -> None:
    res = subprocess.run([sys.executable, "-m", "dettui.cli", "-m", web_server, *argv],
                         capture_output=True, text=True, timeout=60,
                         env=plain_env(tmp_path / "config"))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"Not a master: {web_server} is not a dettui/Determined "
                                 f"master (it answered POST /api/v1/auth/login with "
                                 f"text/html, HTTP "), res.stderr
    assert '"Welcome to nginx!"' in res.stderr and "<" not in res.stderr, res.stderr
    assert "give the master's address with -m or DET_MASTER" in res.stderr
