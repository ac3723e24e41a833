"""The real determined==0.38.1 `det` run many times against one master, and what each run
says: its commands read from det's own parser, each command run in a process forked from one
that imported the CLI once (the import is most of a `det` run's time), `WORKERS` at a time,
and each answer sorted into works / a clear message / a failure."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from enum import StrEnum
from http import HTTPStatus
from pathlib import Path

from tests.compat.test_det_cli import DET_VENV
from tests.conftest import Served

WORKERS = 4
TIMEOUT = 30  # seconds a command may take before it counts as a hang


# Run in the det venv: every leaf of the parser `det` builds, by its main name (aliases such as
# `e` for `experiment` are the same parser). `help` at each level is argparse's own.
ENUMERATE = """
import argparse, json
from determined import cli
from determined.cli import cli as det

def leaves(parser, path):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path)
        return
    seen = set()
    for name, sub in subs[0]._name_parser_map.items():  # main name first, then its aliases
        if id(sub) in seen or name == "help":
            continue
        seen.add(id(sub))
        yield from leaves(sub, path + [name])

parser = det.make_parser()
cli.add_args(parser, det.all_args_description)
print(json.dumps(sorted(leaves(parser, []))))
"""


def det_commands() -> list[str]:
    assert DET_VENV
    res = subprocess.run([str(Path(DET_VENV) / "bin" / "python"), "-c", ENUMERATE],
                         capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(res.stdout))


class State(StrEnum):
    WORKS = "works"
    MESSAGE = "clear message"
    NOT_RUN = "not run"
    FAIL = "FAIL"


# Run in the det venv: imports the CLI once, then runs each command in a process forked from
# it that calls det's own `main` with the command's arguments (as the `det` script does) in the
# command's home, `workers` at a time, a phase starting when the one before has ended; a command
# still running after `timeout` s is killed. Prints [exit code or null, stdout, stderr, seconds]
# per command, in order.
RUNNER = """
import json, os, signal, sys, tempfile, time, traceback
from determined.cli.cli import main

job = json.load(sys.stdin)
scratch = tempfile.mkdtemp(dir=job["scratch"])
results, running, late = {}, {}, set()
queue = sorted(enumerate(job["runs"]), key=lambda item: item[1]["phase"])


def child(i, run):
    code = 1
    try:
        os.setsid()  # no terminal: a password prompt reads stdin, a kill takes the whole group
        with open(f"{scratch}/{i}.in", "w") as f:
            f.write(run["stdin"])
        for fd, name, flags in ((0, "in", os.O_RDONLY), (1, "out", os.O_WRONLY | os.O_CREAT),
                                (2, "err", os.O_WRONLY | os.O_CREAT)):
            os.dup2(os.open(f"{scratch}/{i}.{name}", flags), fd)
        os.environ.update(HOME=run["home"], XDG_CONFIG_HOME=run["home"])
        os.chdir(run["home"])
        try:
            main(["-m", job["master"], *run["argv"]])
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def read(i, name):
    with open(f"{scratch}/{i}.{name}", errors="replace") as f:
        return f.read()


while queue or running:
    while queue and len(running) < job["workers"] and all(
            job["runs"][j]["phase"] == queue[0][1]["phase"] for j, _ in running.values()):
        i, run = queue.pop(0)
        pid = os.fork()
        if pid == 0:
            child(i, run)
        running[pid] = (i, time.monotonic())
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid == 0:
        for p, (i, began) in running.items():
            if time.monotonic() - began > job["timeout"] and i not in late:
                late.add(i)
                os.killpg(p, signal.SIGKILL)
        time.sleep(0.005)
        continue
    i, began = running.pop(pid)
    code = None if i in late else os.waitstatus_to_exitcode(status)
    results[i] = [code, read(i, "out"), read(i, "err"), time.monotonic() - began]
print(json.dumps([results[i] for i in range(len(job["runs"]))]))
"""


@dataclass(frozen=True)
class Call:
    """One run of `det`: in `home`, with `args`, reading `stdin`, in `phase`."""

    home: Path
    args: str
    stdin: str = ""
    phase: int = 0


@dataclass(frozen=True)
class Ran:
    """One command's answer; `code` None: no answer in time."""

    code: int | None
    stdout: str
    stderr: str
    seconds: float


class Det:
    """The real `det` against one master. Each command runs in a home of its own, most of them
    a copy of the admin's session, so that concurrent commands never write one file."""

    def __init__(self, served: Served, root: Path) -> None:
        self.served, self.root = served, root
        self.admin = self.home("admin")
        [login] = self.run([Call(self.admin, "user login admin", "\n")])
        assert login.code == 0, login

    def home(self, name: str, copy: bool = False) -> Path:
        home = self.root / "homes" / name
        if copy:
            shutil.copytree(self.admin, home)
        else:
            home.mkdir(parents=True)
        return home

    def run(self, runs: list[Call], timeout: float = TIMEOUT) -> list[Ran]:
        """Each call, `WORKERS` at a time, phase after phase."""
        assert DET_VENV
        job = {"master": self.served.url, "workers": WORKERS, "timeout": timeout,
               "scratch": str(self.root),
               "runs": [{"home": str(c.home), "argv": shlex.split(c.args), "stdin": c.stdin,
                         "phase": c.phase} for c in runs]}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DETTUI_"))}
        res = subprocess.run([str(Path(DET_VENV) / "bin" / "python"), "-c", RUNNER],
                             input=json.dumps(job), capture_output=True, text=True, env=env,
                             timeout=timeout * len(runs) + 60)
        assert res.returncode == 0, res.stderr
        return [Ran(*r) for r in json.loads(res.stdout)]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
FAIL_SIGNS = {"Traceback (most recent call last)": "a traceback", "no such route": "no such route",
              "internal error": "an internal error (5xx)"}
# An HTTP status alone ("Failed to X: Method Not Allowed") says nothing of why.
BARE = {status.phrase for status in HTTPStatus} | {"", "NotFound", "404", "405", "500"}
# Lines a command prints around what it has to say: Python's note that the password prompt
# cannot hide what is typed (no terminal here), the context's upload progress.
NOISE = re.compile(r"\S*getpass\.py:\d+: GetPassWarning|passwd = fallback_getpass|"
                   r"Warning: Password input may be echoed|Preparing files to send to master")


def lines_of(text: str) -> list[str]:
    """The lines with text on them (of a progress bar's line, what it last showed)."""
    lines = (line.split("\r")[-1].strip() for line in ANSI.sub("", text).splitlines())
    return [line for line in lines if line and not NOISE.match(line)]


def classify(res: Ran) -> tuple[State, str]:
    """What one run of a command says: works (exit 0), a clear message (a one-line refusal),
    or FAIL with why."""
    if res.code is None:
        return State.FAIL, f"no answer in {TIMEOUT} s"
    out, err = lines_of(res.stdout), lines_of(res.stderr)
    for sign, why in FAIL_SIGNS.items():
        for lines in (err, out):
            if any(sign in line for line in lines):
                shown = next((ln for ln in reversed(lines) if re.match(
                    r"[\w.]+(Error|Exception)\b", ln)), lines[-1]) if why == "a traceback" \
                    else next(ln for ln in lines if sign in ln)
                return State.FAIL, f"{why}: {shown}"
    said = out + err
    if res.code == 0:
        refused = next((line for line in said if "not supported" in line), None)
        if refused:  # e.g. `det notebook set priority` prints "Skipping: ..." and exits 0
            return State.MESSAGE, refused
        return State.WORKS, said[0] if said else "(prints nothing)"
    if res.code == 2 and err and err[0].startswith("usage: det"):
        return State.FAIL, "the invocation is wrong: " + err[-1]
    message = (err or out or [""])[-1]
    if message.endswith(":") or message.rsplit(": ", 1)[-1].strip() in BARE:
        return State.FAIL, f"a bare HTTP status: {message}"
    return State.MESSAGE, message


def normalised(text: str, values: dict[str, str], root: Path, url: str, width: int = 110) -> str:
    """`text` with what changes run to run (this run's ids, paths, times, port) named instead,
    cut to `width` and safe in a Markdown table cell."""
    text = text.replace(url, "<master>")
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[1])):
        if len(value) > 2:  # ids of experiments and trials are the same in every run
            text = re.sub(rf"(?<![\w.-]){re.escape(value)}(?![\w-])", f"<{name}>", text)
    text = text.replace(str(root), "<tmp>")
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>",
                  text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?", "<time>", text)
    text = re.sub(r"\b\d{8}T\d{6}\b", "<time>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > width:
        text = text[:width - 1] + "…"
    return text.replace("|", "\\|").replace("`", "'")

