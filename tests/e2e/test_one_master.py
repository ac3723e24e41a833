"""One master per state dir, and the errors a user meets starting or reaching one: a second
`dettui serve` refuses naming the running master's URL and PID; a busy port names the process
holding it; an unreachable master is one line and a non-zero exit; `dettui serve --stop` lets
running trials checkpoint and stop before the master exits; a one-off `-u` stays one-off."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dettui import statedir
from tests.conftest import SAMPLE, Served, marked_processes

pytestmark = pytest.mark.slow


def dettui(*args: str, env: dict[str, str] | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dettui.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def one_line(res: subprocess.CompletedProcess[str]) -> str:
    """The error a user sees: exactly one line on stderr, no traceback, a non-zero exit."""
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    return res.stderr


def test_a_second_serve_refuses_naming_the_running_master(served: Served) -> None:
    assert served.proc is not None
    holder = statedir.holder(served.state_dir)
    assert holder == statedir.Holder(served.url, served.proc.pid, statedir.SERVE)
    err = one_line(dettui("serve", "--state-dir", str(served.state_dir), "--port", "0",
                          env=served.env()))
    assert served.url in err and f"pid {served.proc.pid}" in err, err
    assert "dettui serve --stop" in err
    assert len(served.api("GET", "/api/v1/agents")["agents"]) == 1, "no second agent"


def test_a_busy_port_names_the_process_holding_it(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        err = one_line(dettui("serve", "--state-dir", str(tmp_path / "s"), "--port", str(port),
                              "--no-agent"))
    assert f"127.0.0.1:{port}" in err and "in use" in err, err
    assert f"(pid {os.getpid()})" in err, err  # this test's process holds it
    assert statedir.holder(tmp_path / "s") is None, "the lock went with the failed start"


@pytest.mark.parametrize("argv", [["--master", "http://127.0.0.1:1"],
                                  ["e", "list", "-m", "http://127.0.0.1:1"],
                                  ["-m", "http://127.0.0.1:1", "job", "list"]],
                         ids=["dashboard", "cli-after", "cli-before"])
def test_an_unreachable_master_is_one_line_and_a_non_zero_exit(tmp_path: Path,
                                                               argv: list[str]) -> None:
    env = {**os.environ, "DETTUI_CONFIG_DIR": str(tmp_path / "config")}
    if argv[0] == "--master":  # the dashboard keeps its log in its state dir
        argv = [*argv, "--state-dir", str(tmp_path / "s")]
    err = one_line(dettui(*argv, env=env))
    assert "cannot reach the master at http://127.0.0.1:1" in err, err


def test_serve_stop_lets_running_trials_checkpoint_first(served: Served) -> None:
    served.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE), "--config",
               "hyperparameters.step_sleep=0.05", "--config", "searcher.max_length.batches=5000")
    deadline = time.monotonic() + 60
    while served.api("GET", "/api/v1/trials/1")["trial"]["totalBatchesProcessed"] < 20:
        assert time.monotonic() < deadline, "the trial never got going"
        time.sleep(0.2)
    res = dettui("serve", "--stop", "--state-dir", str(served.state_dir), env=served.env(),
                 timeout=120)
    assert res.returncode == 0, res.stderr
    assert "running trials checkpoint and stop first" in res.stdout
    assert "has stopped" in res.stdout
    assert served.proc is not None and served.proc.wait(10) == 0
    assert statedir.holder(served.state_dir) is None
    assert marked_processes() == []
    again = Served(served.state_dir, served.config_dir, extra=["--no-agent"])
    again.start()
    try:
        trial = again.api("GET", "/api/v1/trials/1")["trial"]
        assert trial["state"] == "STATE_QUEUED", "requeued, to resume when agents come back"
        ckpts = again.api("GET", "/api/v1/experiments/1/checkpoints")["checkpoints"]
        assert ckpts, "it checkpointed before it stopped"
        assert "told to stop at step" in again.cli("t", "logs", "1").stdout
    finally:
        again.stop()
    assert dettui("serve", "--stop", "--state-dir", str(served.state_dir)).stdout.startswith(
        "no master runs on")


def test_a_one_off_user_stays_one_off(served: Served) -> None:
    served.cli("e", "list")  # logs in as the default user, `determined`
    served.cli("e", "list", "-u", "admin")
    served.cli("-u", "admin", "job", "list")
    tokens = json.loads((served.config_dir / "auth.json").read_text())[served.url]
    assert tokens["username"] == "determined"
    assert "admin" in tokens["others"]
    owner = json.loads(served.cli("e", "list", "--json").stdout)
    assert owner == []
    created = served.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))
    assert "Created experiment" in created.stdout
    exps = served.api("GET", "/api/v1/experiments")["experiments"]
    assert [e["username"] for e in exps] == ["determined"]


def test_list_commands_answer_without_loading_aiohttp_or_rich(headless: Served) -> None:
    """`dettui job list`, `e list`, `agent list` and `user login` talk to the master over the
    standard library's HTTP (aiohttp's import is 0.12 s of a command meant to answer in 0.5 s);
    the lists' tables fit, and are laid out without Rich."""
    headless.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))
    name = headless.api("GET", "/api/v1/experiments/1")["experiment"]["name"]
    code = ("import sys; from dettui import cli; rc = cli.main(sys.argv[1:]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'rich'}), rc)")
    for argv in (["job", "list"], ["e", "list"], ["agent", "list"],
                 ["user", "login", "determined", "--password", headless.password]):
        res = subprocess.run([sys.executable, "-c", code, "-m", headless.url, *argv],
                             capture_output=True, text=True, timeout=60, env=headless.env())
        loaded = "['rich'] 0" if argv[0] == "user" else "[] 0"  # it prints a sentence by Rich
        assert res.stdout.splitlines()[-1] == loaded, (argv, res.stdout, res.stderr)
        if argv == ["job", "list"]:
            assert f"{name} (1)" in res.stdout, res.stdout


def test_the_local_agent_offers_one_cpu_slot_per_core(tmp_path: Path) -> None:
    """Without --agent-slots (as `make run` and `make serve` start it), so that the samples
    that need 2 slots (ddp.yaml, the ASHA search's concurrency) run as they are."""
    from dettui.agent.agent import cpu_cores

    s = Served(tmp_path / "state", tmp_path / "config")
    s.start()
    try:
        agents = s.api("GET", "/api/v1/agents")["agents"]
        assert [len(a["slots"]) for a in agents] == [cpu_cores()]
    finally:
        s.stop()


def test_a_bad_config_says_invalid_experiment_configuration_once(headless: Served,
                                                                 tmp_path: Path) -> None:
    """Issue 12 saw "Invalid experiment configuration: invalid experiment configuration":
    the title is said once, then where, then each problem."""
    bad = tmp_path / "bad.yaml"
    bad.write_text((SAMPLE / "single.yaml").read_text().replace("slots_per_trial: 1",
                                                                "slots_per_trial: -1"))
    res = headless.cli("e", "create", str(bad), str(SAMPLE), check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"Invalid experiment configuration ({bad}):\n"), res.stderr
    assert res.stderr.casefold().count("invalid experiment configuration") == 1, res.stderr
    assert "  - resources.slots_per_trial: must be >= 0" in res.stderr, res.stderr
    assert headless.api("GET", "/api/v1/experiments")["experiments"] == []
