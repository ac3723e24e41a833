"""Every command of the real determined==0.38.1 `det` CLI, run against one `dettui serve`, and
the SDK's common calls: each must either work or answer with a clear one-line message; a
traceback, "no such route", a bare 404, an internal error or a hang fails the test.

The commands are not listed by hand: they are read from the `det` parser itself (the real
`determined.cli.cli` builds it from `all_args_description`), so a command this file has no
invocation for fails the test rather than being missed. docs/det-commands.md is this run's
table; the test compares it with the file, and `DETTUI_WRITE_DOCS=1` rewrites the file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.compat.conftest import real_404s
from tests.compat.det_runner import (
    Call,
    Det,
    Ran,
    State,
    classify,
    det_commands,
    normalised,
)
from tests.compat.test_det_cli import DET_VENV
from tests.conftest import REPO, Served

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("det_commands"),
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

DOC = REPO / "docs" / "det-commands.md"


@dataclass(frozen=True)
class Invocation:
    """How a command is run: its arguments (a template over the setup's objects, `{exp}`), what
    it reads on stdin, the phase it runs in (a phase starts when the one before has ended: a
    command that undoes another runs after it), its session: `shared` (a copy of the admin's),
    `fresh` (an empty home: a login) or `own` (the admin logged in anew: a logout ends it), and,
    where what it prints changes from run to run (log lines), what the doc says it showed."""

    args: str
    stdin: str = ""
    phase: int = 0
    session: str = "shared"
    shows: str = ""


Inv = Invocation
LOG_LINES = "the last 5 lines of the trial's log"
# Determined deploys its master and agents with Docker or a cloud's tools: dettui is installed
# with pip and started with `dettui serve`, so these are not run (`det deploy` talks to no master).
NOT_RUN = {"deploy": "deploys Determined's own master and agents (Docker or a cloud); dettui is "
                     "`pip install` and `dettui serve`"}

INVOCATIONS: dict[str, Invocation] = {
    "preview-search": Inv("preview-search {search_config}"),
    # experiment
    "experiment list": Inv("experiment list --all"),
    "experiment config": Inv("experiment config {exp}"),
    "experiment describe": Inv("experiment describe {exp}"),
    "experiment logs": Inv("experiment logs {exp} --tail 5", shows=LOG_LINES),
    "experiment download-model-def": Inv("experiment download-model-def {exp} --output-dir {out}"),
    "experiment list-trials": Inv("experiment list-trials {exp}"),
    "experiment list-checkpoints": Inv("experiment list-checkpoints {exp}"),
    "experiment create": Inv("experiment create --paused {config} {ctx}"),
    "experiment continue": Inv("experiment continue {exp_continue}"),
    "experiment activate": Inv("experiment activate {paused_activate}"),
    "experiment cancel": Inv("experiment cancel {paused_cancel}"),
    "experiment pause": Inv("experiment pause {paused_pause}"),
    "experiment archive": Inv("experiment archive {exp_archive}"),
    "experiment unarchive": Inv("experiment unarchive {exp_archive}", phase=1),
    "experiment delete": Inv("experiment delete {exp_delete} --yes"),
    "experiment download": Inv("experiment download {exp} -o {out}"),
    "experiment kill": Inv("experiment kill {paused_kill}"),
    "experiment wait": Inv("experiment wait {exp} --polling-interval 1"),
    "experiment label add": Inv("experiment label add {exp} compat"),
    "experiment label remove": Inv("experiment label remove {exp} compat", phase=1),
    "experiment move": Inv("experiment move {exp_move} Uncategorized Uncategorized"),
    "experiment set description": Inv("experiment set description {exp} 'a described run'"),
    "experiment set name": Inv("experiment set name {exp_move} renamed"),
    "experiment set gc-policy": Inv("experiment set gc-policy {exp} --save-experiment-best 1 "
                                  "--save-trial-best 1 --save-trial-latest 1 --yes"),
    "experiment set max-slots": Inv("experiment set max-slots {exp} 2"),
    "experiment set log-retention": Inv("experiment set log-retention {exp} --days 30"),
    "experiment set weight": Inv("experiment set weight {exp} 2"),
    "experiment set priority": Inv("experiment set priority {paused_pause} 42"),
    "experiment delete-tb-files": Inv("experiment delete-tb-files {exp}"),
    # checkpoint
    "checkpoint download": Inv("checkpoint download {ckpt} -o {out}"),
    "checkpoint describe": Inv("checkpoint describe {ckpt}"),
    "checkpoint delete": Inv("checkpoint delete {ckpt_delete} --yes"),
    "checkpoint rm": Inv("checkpoint rm {ckpt_rm} --glob '*.bin' --yes"),
    # master
    "master config show": Inv("master config show"),
    "master config set": Inv("master config set --log.level INFO"),
    "master info": Inv("master info"),
    "master logs": Inv("master logs --tail 5", shows="the master's last log lines"),
    "master cluster-message set": Inv("master cluster-message set -m 'maintenance at noon'"),
    "master cluster-message get": Inv("master cluster-message get", phase=1),
    "master cluster-message clear": Inv("master cluster-message clear --clear", phase=2),
    # model
    "model create": Inv("model create model-a --description 'from the command table'"),
    "model list": Inv("model list", phase=1),
    "model register-version": Inv("model register-version model-a {ckpt}", phase=1),
    "model describe": Inv("model describe model-a", phase=2),
    "model list-versions": Inv("model list-versions model-a", phase=2),
    "model move": Inv("model move model-a -w Uncategorized", phase=2),
    "model delete": Inv("model delete model-a", phase=3),
    # agents and slots: disabled once the experiments above ran, enabled after
    "agent list": Inv("agent list"),
    "agent disable": Inv("agent disable {agent}", phase=1),
    "agent enable": Inv("agent enable {agent}", phase=2),
    "slot list": Inv("slot list"),
    "slot disable": Inv("slot disable {agent} 1", phase=1),
    "slot enable": Inv("slot enable {agent} 1", phase=2),
    # notebooks, shells, TensorBoards, commands: containers Determined starts
    "notebook list": Inv("notebook list"),
    "notebook config": Inv("notebook config {no_task}"),
    "notebook start": Inv("notebook start"),
    "notebook open": Inv("notebook open {no_task}"),
    "notebook logs": Inv("notebook logs {task} --tail 5", shows=LOG_LINES),
    "notebook kill": Inv("notebook kill {no_task}"),
    "notebook set priority": Inv("notebook set priority {no_task} 5"),
    "shell list": Inv("shell list"),
    "shell config": Inv("shell config {no_task}"),
    "shell start": Inv("shell start"),
    "shell open": Inv("shell open {no_task}"),
    "shell show_ssh_command": Inv("shell show_ssh_command {no_task}"),
    "shell show-ssh-command": Inv("shell show-ssh-command {no_task}"),
    "shell logs": Inv("shell logs {task} --tail 5", shows=LOG_LINES),
    "shell kill": Inv("shell kill {no_task}"),
    "shell set priority": Inv("shell set priority {no_task} 5"),
    "tensorboard list": Inv("tensorboard list"),
    "tensorboard start": Inv("tensorboard start {exp}"),
    "tensorboard config": Inv("tensorboard config {no_task}"),
    "tensorboard open": Inv("tensorboard open {no_task}"),
    "tensorboard logs": Inv("tensorboard logs {task} --tail 5", shows=LOG_LINES),
    "tensorboard kill": Inv("tensorboard kill {no_task}"),
    "tensorboard set priority": Inv("tensorboard set priority {no_task} 5"),
    "command list": Inv("command list"),
    "command describe": Inv("command describe {no_task}"),
    "command config": Inv("command config {no_task}"),
    "command run": Inv("command run echo hello"),
    "command logs": Inv("command logs {task} --tail 5", shows=LOG_LINES),
    "command kill": Inv("command kill {no_task}"),
    "command set priority": Inv("command set priority {no_task} 5"),
    # jobs and resources
    "job list": Inv("job list"),
    "job update": Inv("job update {job} --priority 7"),
    "job update-batch": Inv("job update-batch {job}.priority=5", phase=1),
    "resources allocations": Inv("resources allocations 2026-01-01T00:00:00Z 2027-01-01T00:00:00Z"),
    "resources raw": Inv("resources raw 2026-01-01T00:00:00Z 2027-01-01T00:00:00Z"),
    "resources aggregated": Inv("resources aggregated 2026-01-01 2026-12-31"),
    "resource-pool bindings add": Inv("resource-pool bindings add default Uncategorized"),
    "resource-pool bindings list-workspaces": Inv("resource-pool bindings list-workspaces default",
                                                phase=1),
    "resource-pool bindings replace": Inv("resource-pool bindings replace default Uncategorized",
                                        phase=2),
    "resource-pool bindings remove": Inv("resource-pool bindings remove default Uncategorized",
                                       phase=3),
    # projects and workspaces
    "project create": Inv("project create Uncategorized p-a"),
    "project list": Inv("project list Uncategorized", phase=1),
    "project list-experiments": Inv("project list-experiments Uncategorized p-a", phase=1),
    "project describe": Inv("project describe Uncategorized p-a", phase=1),
    "project edit": Inv("project edit Uncategorized p-a --description edited", phase=1),
    "project archive": Inv("project archive Uncategorized p-a", phase=2),
    "project unarchive": Inv("project unarchive Uncategorized p-a", phase=3),
    "project delete": Inv("project delete Uncategorized p-a --yes", phase=4),
    "workspace create": Inv("workspace create ws-a"),
    "workspace list": Inv("workspace list", phase=1),
    "workspace list-projects": Inv("workspace list-projects ws-a", phase=1),
    "workspace list-pools": Inv("workspace list-pools ws-a", phase=1),
    "workspace list-members": Inv("workspace list-members ws-a", phase=1),
    "workspace describe": Inv("workspace describe ws-a", phase=1),
    "workspace edit": Inv("workspace edit ws-a --agent-user lab", phase=1),
    "workspace bindings set": Inv("workspace bindings set ws-a --namespace lab", phase=1),
    "workspace bindings list": Inv("workspace bindings list ws-a", phase=2),
    "workspace bindings delete": Inv("workspace bindings delete ws-a", phase=3),
    "workspace resource-quota set": Inv("workspace resource-quota set ws-a 4", phase=1),
    "workspace archive": Inv("workspace archive ws-a", phase=2),
    "workspace unarchive": Inv("workspace unarchive ws-a", phase=3),
    "workspace delete": Inv("workspace delete ws-a --yes", phase=4),
    # tasks: those of a trial that ended
    "task list": Inv("task list"),
    "task logs": Inv("task logs {task} --tail 5", shows=LOG_LINES),
    "task cleanup-logs": Inv("task cleanup-logs"),
    "task create": Inv("task create {task_config}"),
    "task config": Inv("task config {task}"),
    "task fork": Inv("task fork {task_other}"),
    "task pause": Inv("task pause {task_other}"),
    "task unpause": Inv("task unpause {task_other}", phase=1),
    "task kill": Inv("task kill {task_other}", phase=2),
    # templates
    "template create": Inv("template create tmpl-a {template_file}"),
    "template list": Inv("template list", phase=1),
    "template describe": Inv("template describe tmpl-a", phase=1),
    "template set": Inv("template set tmpl-a {template_file}", phase=2),
    "template set-value config": Inv("template set-value config tmpl-a {template_file}", phase=3),
    "template remove": Inv("template remove tmpl-a", phase=4),
    # trials
    "trial describe": Inv("trial describe {trial}"),
    "trial download": Inv("trial download {trial} --latest -o {out}"),
    "trial support-bundle": Inv("trial support-bundle {trial} -o {out}"),
    "trial logs": Inv("trial logs {trial} --tail 5", shows=LOG_LINES),
    "trial kill": Inv("trial kill {trial_other}"),
    "trial set log-retention": Inv("trial set log-retention {trial} --days 30"),
    # users, groups, roles: on a user the first phase creates
    "user create": Inv("user create frank --password Secret-123"),
    "user list": Inv("user list", phase=1),
    "user whoami": Inv("user whoami"),
    "user change-password": Inv("user change-password frank", stdin="Other-456\nOther-456\n",
                              phase=1),
    "user link-with-agent-user": Inv("user link-with-agent-user frank --agent-uid 1001 "
                                   "--agent-gid 1001 --agent-user frank --agent-group lab",
                                   phase=1),
    "user edit": Inv("user edit frank --display-name 'Frank F'", phase=1),
    "user deactivate": Inv("user deactivate frank", phase=2),
    "user activate": Inv("user activate frank", phase=3),
    "user rename": Inv("user rename frank frankie", phase=4),
    "user login": Inv("user login admin", stdin="\n", session="fresh"),
    "user logout": Inv("user logout", session="own"),
    "user-group create": Inv("user-group create group-a --add-user admin", phase=1),
    "user-group list": Inv("user-group list", phase=2),
    "user-group describe": Inv("user-group describe group-a", phase=2),
    "user-group add-user": Inv("user-group add-user group-a frank", phase=2),
    "user-group remove-user": Inv("user-group remove-user group-a frank", phase=3),
    "user-group change-name": Inv("user-group change-name group-a group-b", phase=4),
    "user-group delete": Inv("user-group delete group-b --yes", phase=5),
    "rbac my-permissions": Inv("rbac my-permissions"),
    "rbac list-roles": Inv("rbac list-roles"),
    "rbac list-users-roles": Inv("rbac list-users-roles admin"),
    "rbac list-groups-roles": Inv("rbac list-groups-roles group-a", phase=2),
    "rbac describe-role": Inv("rbac describe-role Viewer"),
    "rbac assign-role": Inv("rbac assign-role Viewer -u frank -w Uncategorized", phase=1),
    "rbac unassign-role": Inv("rbac unassign-role Viewer -u frank -w Uncategorized", phase=2),
    "version": Inv("version"),
    # sign-on, access tokens, OAuth clients
    "auth login": Inv("auth login --headless", session="fresh"),
    "auth list-providers": Inv("auth list-providers"),
    "oauth client list": Inv("oauth client list"),
    "oauth client add": Inv("oauth client add scim example.com"),
    "oauth client remove": Inv("oauth client remove 1", phase=1),
    "token create": Inv("token create admin --description 'from the command table'"),
    "token list": Inv("token list", phase=1),
    "token describe": Inv("token describe 1", phase=1),
    "token edit": Inv("token edit 1 --description edited", phase=1),
    "token revoke": Inv("token revoke 1", phase=2),
    "token login": Inv("token login not-a-token", session="fresh"),
    "config-policies set": Inv("config-policies set experiment {policy_file}"),
    "config-policies describe": Inv("config-policies describe experiment", phase=1),
    "config-policies delete": Inv("config-policies delete experiment", phase=2),
    # development helpers
    "dev auth-token": Inv("dev auth-token", shows="the session's token"),
    "dev curl": Inv("dev curl /api/v1/me"),
    "dev bindings list": Inv("dev bindings list"),
    "dev bindings call": Inv("dev bindings call get_GetMaster"),
}

TRAIN = """
from determined import core

with core.init() as ctx:
    for step in (1, 2):  # validation grows: step 1 is the best checkpoint, step 2 the latest
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
        ctx.train.report_validation_metrics(steps_completed=step, metrics={"val_loss": step})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            (path / "weights.bin").write_bytes(b"w" * 100)
    print("trained", flush=True)
"""
CONFIG = """
name: commands
entrypoint: python3 train.py
searcher: {name: single, metric: val_loss}
"""
SEARCH = """
name: search
entrypoint: python3 train.py
hyperparameters: {lr: {type: double, minval: 0.001, maxval: 0.1}}
searcher: {name: random, metric: val_loss, max_trials: 3, max_length: 2}
"""
TEMPLATE = "description: from a template\n"
POLICY = "invariant_config:\n  description: set by a config policy\n"
TASK = "entrypoint: [echo, hello]\n"
DONE = ("exp", "exp_delete", "exp_archive", "exp_continue", "exp_move", "exp_other")
PAUSED = ("paused_activate", "paused_pause", "paused_cancel", "paused_kill")
NO_TASK = "0a1b2c3d-0000-4000-8000-000000000000"  # for commands on containers no one started


@dataclass(frozen=True)
class Outcome:
    command: str
    invocation: str  # as the doc shows it: placeholders, not this run's ids
    state: State
    printed: str  # the one line that tells what happened, this run's ids and paths replaced


def created_id(ran: Ran) -> int:
    m = re.search(r"Created experiment (\d+)", ran.stdout)
    assert m, ran
    return int(m.group(1))


def set_up(served: Served, det: Det, root: Path) -> dict[str, str]:
    """The objects the commands act on: ended experiments with trials, tasks and checkpoints,
    paused ones, the files commands read. Values by placeholder name."""
    ctx = root / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text(TRAIN)
    files = {"config": CONFIG, "search_config": SEARCH, "template_file": TEMPLATE,
             "policy_file": POLICY, "task_config": TASK}
    values = {"ctx": str(ctx), "no_task": NO_TASK}
    for name, text in files.items():
        (root / f"{name}.yaml").write_text(textwrap.dedent(text))
        values[name] = str(root / f"{name}.yaml")
    # ended ones first, then paused ones; within each, roles go to ids in order, so that each
    # role has the same id in every run
    made = det.run([Call(det.admin, f"experiment create {flag} {values['config']} {ctx}", "", n)
                    for n, (flag, roles) in enumerate((("", DONE), ("--paused", PAUSED)))
                    for _ in roles], timeout=120)
    ids = sorted(created_id(ran) for ran in made)
    values.update(zip(DONE + PAUSED, map(str, ids), strict=True))
    for role in DONE:
        assert served.wait_experiment(int(values[role]), timeout=120)["state"] == \
            "STATE_COMPLETED", role
    for role, key in (("exp", ""), ("exp_other", "_other")):
        trial = served.api("GET", f"/api/v1/experiments/{values[role]}/trials")["trials"][0]
        values["trial" + key], values["task" + key] = str(trial["id"]), trial["taskId"]
    for role, keys in (("exp", ("ckpt",)), ("exp_other", ("ckpt_delete", "ckpt_rm"))):
        ckpts = served.api("GET", f"/api/v1/experiments/{values[role]}/checkpoints")
        uuids = sorted((c["metadata"]["steps_completed"], c["uuid"]) for c in ckpts["checkpoints"]
                       if c["state"] == "STATE_COMPLETED")
        values.update(zip(keys, (u for _, u in uuids), strict=False))
    values["job"] = served.api("GET", f"/api/v1/experiments/{values['paused_pause']}")[
        "experiment"]["jobId"]
    values["agent"] = served.api("GET", "/api/v1/agents")["agents"][0]["id"]
    return values


def run_all(det: Det, values: dict[str, str], root: Path) -> list[Outcome]:
    """Every invocation, phase after phase, each phase `WORKERS` at a time."""
    homes, outs = {}, {}
    for command, how in INVOCATIONS.items():
        name = command.replace(" ", "-")
        homes[command] = det.home(name, copy=how.session == "shared")
        outs[command] = root / "out" / name
        outs[command].mkdir(parents=True)
    # a session of its own is opened in a phase before all others
    logins = [Call(homes[c], "user login admin", "\n", -1) for c, how in INVOCATIONS.items()
              if how.session == "own"]
    ran = det.run(logins + [Call(homes[c], how.args.format(**values, out=outs[c]), how.stdin,
                                 how.phase) for c, how in INVOCATIONS.items()])
    assert all(r.code == 0 for r in ran[:len(logins)]), ran[:len(logins)]
    outcomes = []
    for (command, how), res in zip(INVOCATIONS.items(), ran[len(logins):], strict=True):
        state, printed = classify(res)
        if state is State.WORKS and how.shows and res.stdout.strip():
            printed = how.shows
        shown = "det " + re.sub(r"\{(\w+)\}", r"<\1>", how.args)
        outcomes.append(Outcome(command, shown, state, normalised(
            printed, {**values, "out": str(outs[command])}, root, det.served.url)))
    return sorted(outcomes, key=lambda o: o.command)


# Run in the det venv with the master's URL and the setup's ids: each call prints one JSON line
# (name, state, what it returned or said). An exception the SDK raises for an answer the master
# gave on purpose is a clear message; anything else, a 404 without a message, is a failure.
SDK = """
import json, sys
from determined.common.api import errors
from determined.experimental import client

url, exp_id, trial_id, uuid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def call(name, fn, show=None):
    try:
        got = fn()
    except errors.NotFoundException as e:
        print(json.dumps([name, "FAIL" if not str(e).strip() else "clear message", str(e)]))
        return None
    except (errors.APIException, errors.BadRequestException) as e:
        print(json.dumps([name, "clear message", str(e)]))
        return None
    except Exception as e:
        print(json.dumps([name, "FAIL", f"{type(e).__name__}: {e}"]))
        return None
    kind = type(got).__name__
    if isinstance(got, list):
        kind = f"list of {type(got[0]).__name__}" if got else "an empty list"
    said = show() if show else "returned " + ("None" if got is None else kind)
    print(json.dumps([name, "works", said]))
    return got


def labels():
    return "the experiment's labels are now " + repr(sorted(client.get_experiment(exp_id).labels
                                                             or []))

call("client.login", lambda: client.login(master=url, user="admin", password=""))
call("client.list_experiments", lambda: list(client.list_experiments()))
exp = call("client.get_experiment", lambda: client.get_experiment(exp_id))
if exp is not None:
    call("Experiment.add_label", lambda: exp.add_label("sdk"), labels)
    call("Experiment.remove_label", lambda: exp.remove_label("sdk"), labels)
    call("Experiment.list_trials", lambda: exp.list_trials())
    call("Experiment.top_checkpoint", lambda: exp.top_checkpoint())
    call("Experiment.list_checkpoints", lambda: exp.list_checkpoints())
trial = call("client.get_trial", lambda: client.get_trial(trial_id))
if trial is not None:
    call("Trial.iter_metrics", lambda: list(trial.iter_metrics("validation")))
    call("Trial.iter_logs", lambda: list(trial.iter_logs(tail=5)))
call("client.get_checkpoint", lambda: client.get_checkpoint(uuid))
call("client.create_model", lambda: client.create_model("sdk-model"))
call("client.get_model", lambda: client.get_model("sdk-model"))
call("client.list_models", lambda: client.list_models())
call("client.list_users", lambda: client.list_users())
call("client.whoami", lambda: client.whoami())
"""


def run_sdk(det: Det, values: dict[str, str], root: Path) -> list[Outcome]:
    assert DET_VENV
    res = subprocess.run([str(Path(DET_VENV) / "bin" / "python"), "-c", SDK, det.served.url,
                          values["exp"], values["trial"], values["ckpt"]], capture_output=True,
                         text=True, timeout=120, cwd=root,
                         env={"HOME": str(det.home("sdk")), "PATH": "/usr/bin:/bin"})
    lines = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("[")]
    assert lines, res.stdout + res.stderr
    outcomes = []
    for name, state, said in lines:
        if state == State.MESSAGE:  # held to the CLI's rules: no "no such route", no bare status
            state, said = classify(Ran(1, "", said, 0))
        outcomes.append(Outcome(name, "", State(state), normalised(said, values, root,
                                                                   det.served.url)))
    return outcomes


HEADER = """# Every `det` command against dettui

Generated by `tests/compat/test_det_commands.py`; do not edit it by hand. The test reads every
command from the parser of the real determined==0.38.1 `det` (so none is left out), runs each
against one `dettui serve` with one agent, on experiments, trials and checkpoints a setup step
made, and compares this file with what it saw. To rewrite it after a change:

    DETTUI_WRITE_DOCS=1 DETTUI_DET_VENV=$PWD/.venv-det .venv/bin/pytest \\
        tests/compat/test_det_commands.py

States: **works**: exit 0. **clear message**: a one-line answer saying why not (dettui lacks
the feature, or Determined's Enterprise Edition does), no traceback. **FAIL**: a traceback,
"no such route", a bare HTTP status (404, 405, ...), an internal error or no answer in 30 s;
the test fails on any. **not run**: with why. What it printed: the first line of a command
that works (its log lines described instead, as they change from run to run), the message of
one that does not; this run's ids, paths and times are named in angle brackets.
"""


def render(commands: list[Outcome], sdk: list[Outcome]) -> str:
    counts = ", ".join(f"{sum(o.state is s for o in commands)} {s.value}" for s in State)
    lines = [HEADER, f"## The CLI ({len(commands)} commands: {counts})", "",
             "| command | invocation | state | what it printed |", "|---|---|---|---|"]
    lines += [f"| {o.command} | {f'`{o.invocation}`' if o.invocation else '—'} | "
              f"{o.state.value} | {o.printed} |" for o in commands]
    lines += ["", "## The SDK (`determined.experimental.client`)", "",
              "| call | state | what it returned or said |", "|---|---|---|"]
    lines += [f"| `{o.command}` | {o.state.value} | {o.printed} |" for o in sdk]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Results:
    commands: list[Outcome]
    sdk: list[Outcome]
    real_404s: list[str]  # METHOD PATH of each 404 the master answered det or the SDK
    internal_errors: list[str]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Results]:
    """One master, its setup, every command and the SDK's calls: the tests below read it."""
    root = tmp_path_factory.mktemp("det-commands")
    served = Served(root / "state", root / "config", extra=["--agent-slots", "2"])
    served.start()
    try:
        det = Det(served, root)
        values = set_up(served, det, root)
        commands = run_all(det, values, root)
        commands += [Outcome(c, "", State.NOT_RUN, why) for c, why in NOT_RUN.items()]
        sdk = run_sdk(det, values, root)
    finally:
        served.stop()
    assert served.log_path is not None
    log = served.log_path.read_text(errors="replace")
    yield Results(sorted(commands, key=lambda o: o.command), sdk, real_404s(served.log_path),
              [ln for ln in log.splitlines() if "internal error on" in ln])


def test_every_det_command_is_run_here() -> None:
    """A command det gains (or loses) in another release shows up here, not silently."""
    commands = set(det_commands())
    missing = commands - set(INVOCATIONS) - set(NOT_RUN)
    stale = (set(INVOCATIONS) | set(NOT_RUN)) - commands
    assert not missing and not stale, f"det commands without an invocation here: " \
        f"{sorted(missing)}; invocations of no det command: {sorted(stale)}"


def test_every_det_command_works_or_says_why(results: Results) -> None:
    failed = [f"{o.command}: {o.printed}" for o in results.commands if o.state is State.FAIL]
    assert not failed, f"{len(failed)} det commands failed:\n" + "\n".join(failed)
    assert not results.internal_errors, "\n".join(results.internal_errors)


def test_the_sdks_common_calls_work_or_say_why(results: Results) -> None:
    failed = [f"{o.command}: {o.printed}" for o in results.sdk if o.state is State.FAIL]
    assert not failed, "SDK calls failed:\n" + "\n".join(failed)


# `det notebook|tensorboard open <no_task>` ask for a task no trial has: Determined answers 404
# for an unknown task id too (dettui's message says its only tasks are trials').
@pytest.mark.expect_404(r"GET /api/v1/tasks/[0-9a-f-]+")
def test_no_bare_404_to_the_real_package(results: Results, request: pytest.FixtureRequest) -> None:
    expected = [re.compile(m.args[0]) for m in request.node.iter_markers("expect_404")]
    unexpected = [seen for seen in results.real_404s
                  if not any(p.fullmatch(seen) for p in expected)]
    assert not unexpected, "the master answered 404 to det or the SDK:\n" + "\n".join(unexpected)


def test_the_doc_is_this_runs_table(results: Results) -> None:
    table = render(results.commands, results.sdk)
    if os.environ.get("DETTUI_WRITE_DOCS") == "1":
        DOC.write_text(table)
    assert DOC.read_text() == table, (f"{DOC} differs from this run: rewrite it with "
                                      "DETTUI_WRITE_DOCS=1 and read the diff")


@pytest.mark.parametrize(("code", "stdout", "stderr", "state"), [
    (0, "Created experiment 3\n", "", State.WORKS),
    (1, "", "Failed to list notebooks: notebooks are not supported by dettui: run Jupyter\n",
     State.MESSAGE),
    (0, "Skipping: shells are not supported by dettui (APIException)\n", "", State.MESSAGE),
    (1, "", "Failed to show master config: no such route: /api/v1/master/config\n", State.FAIL),
    (1, "", "Failed to set config policies: Method Not Allowed\n", State.FAIL),
    (1, "", "Failed to describe trial: \n", State.FAIL),
    (1, "", "Failed to X: internal error: KeyError 'id'\n", State.FAIL),
    (1, "", 'Traceback (most recent call last):\n  File "x.py", line 1\nKeyError: 1\nFailed\n',
     State.FAIL),
    (None, "", "", State.FAIL),
    (2, "", "usage: det [-h]\ndet: error: unrecognized arguments: --nope\n", State.FAIL),
])
def test_the_classifier_tells_a_refusal_from_a_failure(code: int | None, stdout: str,
                                                        stderr: str, state: State) -> None:
    assert classify(Ran(code, stdout, stderr, 0))[0] is state
