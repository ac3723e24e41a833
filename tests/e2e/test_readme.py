"""The README's `dettui` commands, copied from README.md by this test and run as printed
(against a real `dettui serve`: DET_MASTER says where it is, as `make serve &` would), in an
80-column terminal: no warning, no line of a table wider than the terminal. Only
the README's own placeholders are filled in (MASTER:8080, TOKEN, ID). Every `dettui ...`
command the README shows is either run here or listed in NOT_RUN with the reason, so a new
one cannot slip by untested."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, Served
from tests.e2e.test_lab import lab_commands
from tests.poll import until

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
NOT_RUN = {  # command as printed -> why this test does not run it
    "dettui serve --host 0.0.0.0 --admin-password-file admin.pass": "starts a master beyond "
    "loopback; tests/e2e/test_serve_flags.py checks that it needs the password, and "
    "tests/e2e/test_secret_files.py reads it from a file",
    "dettui t logs 1 --rank 1": "names the ddp sample's trial (2 ranks); the tour runs the "
    "one-slot sample, whose rank 0 the tour's `t logs 1 --rank 0` shows",
    "dettui user deactivate|activate|change-password": "a summary of three commands",
    "dettui user create NAME [--admin]": "a synopsis; tests/e2e/test_agent.py creates users",
    "dettui --master URL": "the dashboard: tests/tui/test_tmux.py runs it in a terminal",
    "dettui": "the dashboard: tests/tui/test_tmux.py runs it in a terminal",
    "dettui serve": "the master this test runs the others against",
    "dettui serve --no-agent &": "the master this test runs the others against",
    "dettui serve --agent-timeout": "an option named in a sentence",
    "dettui serve --db postgresql://USER@HOST:PORT/DB": "needs a PostgreSQL server: "
    "tests/e2e/test_postgres.py starts one and runs the sample with it",
    "dettui serve --stop": "tests/e2e/test_one_master.py and tests/tui/test_tmux.py",
    "dettui agent token create": "run here as `dettui -u admin agent token create`",
    "dettui user login": "named in a sentence; tests/e2e/test_agent.py logs in",
    "dettui e list": "run here from the tour",
    "dettui e describe": "run here from the tour",
    "dettui t logs": "run here from the tour",
    "dettui t describe": "named in a sentence; run here as `dettui t describe 1`",
    "dettui e cancel": "named in a sentence about detached experiments",
    "dettui checkpoint list EXP": "a synopsis; tests/compat/test_det_results.py runs it",
    "dettui checkpoint download UUID [-o DIR] [--mode auto|direct|master]": "a synopsis; "
    "tests/compat/test_det_results.py downloads in both modes",
    "dettui e download EXP [--top N]": "a synopsis; tests/compat/test_det_results.py runs it",
    "dettui serve --config master.yaml": "a synopsis; tests/e2e/test_slurm.py runs it with a "
    "Slurm pool",
    "dettui agent --master URL --token-file PATH": "a synopsis; tests/e2e/test_multihost.py "
    "runs agents on other (namespaced) hosts",
    "dettui e describe ID": "a synopsis; tests/e2e/test_checkpoint_quota.py reads its usage",
    "dettui checkpoint delete UUID...": "a synopsis; tests/e2e/test_checkpoint_quota.py runs "
    "it",
    "dettui e set gc-policy": "named in a sentence; tests/e2e/test_queue.py runs it",
}
NOT_RUN.update({command: "tests/e2e/test_lab.py runs the lab's commands as root"
                for command in lab_commands()})


def tour() -> list[str]:
    """The commands of the 5-minute tour's code block that start with `dettui`."""
    block = README.split("## A 5-minute tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines()
            if line.startswith("dettui ")]


def inline() -> list[str]:
    """Every `dettui ...` in backticks, and every line of a code block starting with dettui."""
    found = [" ".join(c.split()) for c in re.findall(r"`(dettui(?: [^`]*)?)`", README)]
    blocks = re.findall(r"```\w*\n(.*?)```", README, re.S)
    found += [line.split("  #", 1)[0].strip() for block in blocks
              for line in block.splitlines() if line.startswith("dettui")]
    return [c for c in dict.fromkeys(found) if not c.startswith("dettui/")
            and not c.startswith("dettui.")]


WIDTH = 80  # the tour is followed in a terminal this wide
TABLE = "┏┃┡│└"  # how a line of a table starts (a trial's log lines, a dry run's commands: as long
# as they are)


def run(served: Served, command: str, timeout: float = 300, stderr_first: bool = False) -> str:
    """`command` as a user types it in an 80-column terminal: it succeeds, warns of nothing
    (the tour's first command said "searcher.max_length is deprecated"), and its tables fit
    the width (at 80 columns, `e describe` wrapped every cell onto 4-7 lines)."""
    res = subprocess.run([sys.executable, "-m", "dettui.cli", *shlex.split(command)[1:]],
                         cwd=REPO, env={**served.env(), "COLUMNS": str(WIDTH)},
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{command}:\n{res.stdout}\n{res.stderr}"
    said = res.stdout + res.stderr
    assert "deprecated" not in said and "warning" not in said.lower(), f"{command}:\n{said}"
    wide = [line for line in res.stdout.splitlines() if line[:1] in TABLE and len(line) > WIDTH]
    assert not wide, f"{command}: table lines wider than {WIDTH} columns:\n{res.stdout}"
    return res.stderr + res.stdout if stderr_first else res.stdout


def test_the_readme_commands_run_as_printed(served: Served, tmp_path: Path) -> None:
    commands = tour()
    assert commands[0] == "dettui e create sample_ctx/single.yaml sample_ctx --follow"
    outputs = {c: run(served, c) for c in commands}
    assert "ended: COMPLETED" in outputs[commands[0]]
    assert "validation_loss" in outputs["dettui t logs 1 --rank 0"]
    history = outputs["dettui t metrics 1 --group validation"]
    head, rule, *rows = history.splitlines()
    assert head.split()[:2] == ["Steps", "Time"] and "validation_loss" in head, history
    assert set(rule) <= {"─", " "} and rows, history
    assert "spirals-mlp" in outputs["dettui e list"]
    assert "COMPLETED" in outputs["dettui e list"]  # a State is never cut (`COMPLET…`)
    done = set(commands)

    dry = "dettui e create sample_ctx/ddp.yaml sample_ctx --dry-run"
    assert f"`{dry}`" in README
    planned = run(served, dry)
    assert "torch_distributed" in planned
    assert "start: forked by the agent's fork server" in planned  # as the README says
    search = "dettui e create sample_ctx/search.yaml sample_ctx"
    assert f"`{search}`" in README
    created = run(served, search, stderr_first=True)
    # piped, nothing but the line (a progress bar left a blank line in front)
    assert created.startswith("Created experiment 2"), repr(created)
    describe = "dettui e describe ID"
    assert f"`{describe}`" in README
    assert "adaptive_asha" in run(served, describe.replace("ID", "2"))
    until(lambda: run(served, "dettui agent list"), "the search's trials on the agent",
          timeout=120, done=lambda out: "exp 2 trial" in out)  # what runs on them
    for command in ("dettui t describe 1", "dettui checkpoint list 1", "dettui task list"):
        run(served, command)  # the other tables fit the terminal as well
    served.cli("e", "kill", "2")  # the search itself is tests/e2e/test_search.py's
    trial_class = "dettui e create sample_ctx/trial.yaml sample_ctx"  # the README's trial class
    assert "Created experiment 3" in run(served, trial_class)  # no max_length warning
    served.cli("e", "kill", "3")  # tests/e2e/test_trial_class.py runs it
    done |= {dry, search, describe}

    done |= join_an_agent(served, tmp_path)
    missing = [c for c in inline() if c not in done and c not in NOT_RUN]
    assert not missing, f"README commands neither run nor listed in NOT_RUN: {missing}"


def join_an_agent(served: Served, tmp_path: Path) -> set[str]:
    """`dettui -u admin agent token create` into a file of mode 600, then the agent command
    with its placeholders."""
    create = "dettui -u admin agent token create"
    join = "dettui agent --master http://MASTER:8080 --token-file agent.token --slots 4"
    assert f"`(umask 077; {create} > agent.token)`" in README and f"`{join}`" in README
    token_file = tmp_path / "agent.token"
    token_file.touch(mode=0o600)  # what umask 077 gives
    token_file.write_text(run(served, create))  # stdout is the token alone
    assert re.fullmatch(r"\S{20,}\n", token_file.read_text()), "the token alone"
    command = join.replace("MASTER:8080", served.url.removeprefix("http://")).replace(
        "agent.token", str(token_file))
    argv = [sys.executable, "-m", "dettui.cli", *shlex.split(command)[1:], "--id", "readme",
            "--work-dir", str(tmp_path / "agent")]
    agent = subprocess.Popen(argv, cwd=REPO, env=served.env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            agents = {a["id"]: a for a in served.api("GET", "/api/v1/agents")["agents"]}
            if "readme" in agents:
                assert len(agents["readme"]["slots"]) == 4
                break
            assert time.monotonic() < deadline, "the README's agent never joined"
            time.sleep(0.3)
    finally:
        agent.terminate()
        agent.wait(30)
    return {create, join}
