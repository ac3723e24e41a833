"""The `dettui` command: argument parsing, and the one place that prints errors and exits."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dettui import __version__, auth, statedir
from dettui import client as api
from dettui.errors import DettuiError, InvalidArgument


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dettui", description=(
        "A training control plane for the terminal. With no command: the dashboard with an "
        "embedded master and local agent."))
    p.add_argument("-m", "--master", help="master URL (default: $DET_MASTER, else the master "
                   "of the state dir, else http://127.0.0.1:8080)")
    p.add_argument("-u", "--user", help="user to act as (default: the logged-in user)")
    p.add_argument("--version", action="version", version=f"dettui {__version__}")
    p.add_argument("--state-dir", type=Path, help="state directory of the master (one master "
                   "per state dir: the dashboard attaches to a running one, else starts one in "
                   "the background; commands without -m use its running master)")
    p.add_argument("--port", type=int, default=8080, help="port of the master the dashboard "
                   "starts (default 8080, a free one if that is taken; 0: any free one)")
    p.add_argument("--agent-slots", type=_slots, metavar="N", help="CPU slots of the local "
                   "agent the dashboard starts when no GPU is found (default: one per core)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    _serve_args(sub.add_parser("serve", help="run the master headless (plus a local agent)",
                               description="Run the master (and a local agent) in the "
                               "foreground. Ctrl-C stops it as --stop does: running trials "
                               "checkpoint and go back to the queue first; a second Ctrl-C "
                               "stops at once."))
    _agent_args(sub.add_parser("agent", help="run an agent, or list agents"))
    _experiment_args(sub)
    _trial_args(sub)
    _job_args(sub)
    task = sub.add_parser("task", help="allocations").add_subparsers(dest="verb", required=True)
    tl = task.add_parser("list", aliases=["ls"], help="running allocations, slots and agents")
    tl.add_argument("--json", action="store_true")
    user = sub.add_parser("user", help="users").add_subparsers(dest="verb", required=True)
    ul = user.add_parser("login", help="log in and remember the token")
    ul.add_argument("username", nargs="?")
    ul.add_argument("--password", help="(default: prompt; empty for the default users)")
    user.add_parser("list", aliases=["ls"], help="every user").add_argument(
        "--json", action="store_true")
    uc = user.add_parser("create", help="create a user (admins)")
    uc.add_argument("username")
    uc.add_argument("--admin", action="store_true", help="make the user an admin")
    uc.add_argument("--password", help="(default: prompt)")
    for verb, what in (("activate", "let a user log in again (admins)"),
                       ("deactivate", "stop a user from logging in; ends its sessions "
                                      "(admins)")):
        user.add_parser(verb, help=what).add_argument("username")
    up = user.add_parser("change-password", help="set a password (yours, or anyone's as an "
                                                 "admin)")
    up.add_argument("username", nargs="?", help="(default: you)")
    up.add_argument("--password", help="(default: prompt)")
    lu = user.add_parser("link-with-agent-user", help="the Unix user and group a user's trials "
                         "run as on the agents (admins)")
    lu.add_argument("username")
    lu.add_argument("--agent-uid", type=int, required=True, help="UID on the agents")
    lu.add_argument("--agent-gid", type=int, required=True, help="GID on the agents")
    lu.add_argument("--agent-user", required=True, help="user name on the agents")
    lu.add_argument("--agent-group", required=True, help="group name on the agents")
    for parser in _subparsers(p):
        if parser.prog != "dettui serve":
            _connection_args(parser)
        if any("--json" in a.option_strings for a in parser._actions):  # a command of tables
            parser.add_argument("--wide", action="store_true", help="tables show every column "
                                "and every cell whole, however wide (default: fit the terminal)")
    return p


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below `parser` (each once, whatever its aliases)."""
    found: dict[int, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if id(child) not in found:
                    found[id(child)] = child
                    for below in _subparsers(child):
                        found.setdefault(id(below), below)
    return list(found.values())


def _connection_args(parser: argparse.ArgumentParser) -> None:
    """-m/--master and -u/--user after a subcommand too (`dettui e list -m URL`); given there,
    they win over the ones before it."""
    parser.add_argument("-m", "--master", default=argparse.SUPPRESS,
                        help="master URL (default: $DET_MASTER, else the master of the "
                        "state dir, else http://127.0.0.1:8080)")
    parser.add_argument("-u", "--user", default=argparse.SUPPRESS,
                        help="user to act as, this once (default: the logged-in user)")


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"expected a number of slots from 1 to 4096, got "
                                         f"{text!r}")
    return value


def _job_args(sub: Any) -> None:
    job = sub.add_parser("job", help="the job queue").add_subparsers(dest="verb", required=True)
    jl = job.add_parser("list", aliases=["ls"], help="show the job queue of a resource pool")
    jl.add_argument("--resource-pool", "-p")
    jl.add_argument("--json", action="store_true")
    ju = job.add_parser("update", help="change one job: priority, weight, pool or position")
    ju.add_argument("id", help="job id (or a unique prefix)")
    what = ju.add_mutually_exclusive_group(required=True)
    what.add_argument("--priority", "-p")
    what.add_argument("--weight", "-w")
    what.add_argument("--resource-pool")
    what.add_argument("--ahead-of", metavar="JOB")
    what.add_argument("--behind-of", metavar="JOB")
    ub = job.add_parser("update-batch", help="several updates: JOB.KEY=VALUE ...")
    ub.add_argument("items", nargs="+", metavar="JOB.KEY=VALUE")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, got {text!r}")
    return value


def _serve_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS,
                   help="where the master keeps its database, checkpoints and work dirs")
    s.add_argument("--config", dest="master_config", type=Path,
                   help="master config file (resource pools and their schedulers, host, port)")
    s.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default 8080; 0 picks a free one)")
    s.add_argument("--preemption", action="store_true",
                   help="let urgent jobs preempt running lower-priority trials")
    s.add_argument("--no-agent", action="store_true", help="do not start a local agent")
    s.add_argument("--agent-slots", type=_slots, metavar="N", help="CPU slots of the local "
                   "agent when no GPU is found (default: one per core)")
    s.add_argument("--stop", action="store_true", help="stop the master running on the state "
                   "dir: its running trials checkpoint and stop first, then it exits")
    s.add_argument("--stop-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="on --stop, how long running trials get to checkpoint and stop before "
                   "they are killed (default 60)")
    s.add_argument("--background", action="store_true", help=argparse.SUPPRESS)
    s.add_argument("--agent-timeout", type=_seconds, metavar="SECONDS",
                   help="silence after which an agent counts as lost and its trials are "
                   "requeued (default 20; the master's own stalls do not count)")
    s.add_argument("--admin-password", help="password for admin and determined (required "
                   "beyond loopback; visible in `ps`: prefer --admin-password-file or "
                   "$DETTUI_ADMIN_PASSWORD)")
    s.add_argument("--admin-password-file", type=Path, metavar="PATH",
                   help="read the admin password from this file (mode 600)")
    _sandbox_args(s)
    s.add_argument("--db", metavar="URL", default=os.environ.get("DETTUI_DB"),
                   help="keep the store in PostgreSQL: postgresql://USER@HOST:PORT/DB (default "
                   "$DETTUI_DB, where a password stays out of the process list; none: SQLite "
                   "in the state dir). One master per database")


def _sandbox_args(a: argparse.ArgumentParser) -> None:
    """How an agent (or serve's local agent) runs trials."""
    a.add_argument("--trial-user", metavar="USER", help="as root: the Unix user that trials "
                   "of users not linked to one run as (default: a uid of each user's own, "
                   "2000000000 + the user's id; root only if named)")
    a.add_argument("--no-sandbox", action="store_true", help="run trials even where no "
                   "sandbox (namespaces) can be made: they can then read the agent's files")
    a.add_argument("--trial-nproc", type=int, metavar="N", help="processes and threads a "
                   "trial's Unix user may have (RLIMIT_NPROC; default 4096, 0: no limit)")
    a.add_argument("--trial-start", choices=["fork", "fresh"], default=None,
                   help="fork: Python trials are forked from a server that has imported torch "
                   "and dettui.core (milliseconds to start); fresh: every trial starts a new "
                   "interpreter (default: $DETTUI_TRIAL_START, else fork)")


def _sandbox_options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"no_sandbox": args.no_sandbox, "trial_start": args.trial_start}
    if args.trial_user:
        out["trial_user"] = args.trial_user
    if args.trial_nproc is not None:
        if args.trial_nproc < 0:
            raise InvalidArgument("--trial-nproc: must be 0 (no limit) or more")
        out["nproc"] = args.trial_nproc or None
    return out


def _agent_args(a: argparse.ArgumentParser) -> None:
    a.add_argument("action", nargs="?", choices=["list", "ls", "enable", "disable", "token"],
                   help="list agents, enable/disable one, or manage agent credentials "
                   "(`token create|list|revoke ID`; admins); no action: run an agent")
    a.add_argument("agent_id", nargs="?", help="the agent to enable or disable; for `token`: "
                   "create, list or revoke")
    a.add_argument("credential", nargs="?", help="for `token revoke`: the credential's id")
    a.add_argument("--description", default="", help="for `token create`: what it is for")
    a.add_argument("--slots", type=int, default=1, help="CPU slots when no GPU is found")
    a.add_argument("--pool", default="default", help="resource pool to join")
    a.add_argument("--id", help="agent id (default: hostname)")
    a.add_argument("--token", help="the agent's credential (from `dettui agent token "
                   "create`); visible in `ps`: prefer --token-file or $DETTUI_AGENT_TOKEN")
    a.add_argument("--token-file", type=Path, metavar="PATH",
                   help="read the agent's credential from this file (mode 600)")
    a.add_argument("--work-dir", type=Path, help="where allocations' work dirs go")
    _sandbox_args(a)
    a.add_argument("--address", help="address peers use to reach this agent (default: the one "
                   "on the route to the master)")
    a.add_argument("--json", action="store_true")


def _experiment_args(sub: Any) -> None:
    e = sub.add_parser("experiment", aliases=["e"], help="experiments")
    ev = e.add_subparsers(dest="verb", required=True)
    c = ev.add_parser("create", help="create an experiment from a config and a context dir")
    c.add_argument("config", type=Path)
    c.add_argument("context", type=Path)
    c.add_argument("-i", "--include", type=Path, action="append", default=[])
    c.add_argument("--config", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a config key (repeatable)")
    c.add_argument("-f", "--follow", action="store_true", help="stream the first trial's logs")
    c.add_argument("--paused", action="store_true", help="create without starting")
    c.add_argument("--dry-run", action="store_true",
                   help="print each node's commands and environment; create nothing")
    c.add_argument("--json", action="store_true")
    ls = ev.add_parser("list", aliases=["ls"], help="list experiments")
    ls.add_argument("-a", "--all", action="store_true", help="include archived experiments")
    ls.add_argument("--json", action="store_true")
    d = ev.add_parser("describe", help="an experiment, its trials and checkpoints")
    d.add_argument("id", type=int)
    d.add_argument("--json", action="store_true")
    for verb in ("pause", "activate", "cancel", "kill", "archive", "unarchive"):
        v = ev.add_parser(verb, help=f"{verb} an experiment")
        v.add_argument("id", type=int)
    rm = ev.add_parser("delete", help="delete an ended experiment with its checkpoints, logs "
                                      "and metrics")
    rm.add_argument("id", type=int)
    rm.add_argument("--yes", action="store_true", help="do not ask")
    es = ev.add_parser("set", help="change an experiment").add_subparsers(dest="what",
                                                                          required=True)
    sp = es.add_parser("priority", help="set the priority (1 = most urgent)")
    sp.add_argument("id", type=int)
    sp.add_argument("priority", type=int)
    gc = es.add_parser("gc-policy", help="checkpoint GC policy (preview without --yes)")
    gc.add_argument("id", type=int)
    gc.add_argument("--save-experiment-best", type=int, required=True)
    gc.add_argument("--save-trial-best", type=int, required=True)
    gc.add_argument("--save-trial-latest", type=int, required=True)
    gc.add_argument("--yes", action="store_true", help="apply without previewing")
    gc.add_argument("--json", action="store_true", help="the preview as JSON")
    dl = ev.add_parser("download", help="download the best checkpoints (by the searcher metric)")
    dl.add_argument("id", type=int)
    dl.add_argument("--top", type=int, default=1, help="how many (default 1)")
    dl.add_argument("-o", "--output", type=Path, default=Path("checkpoints"))
    dl.add_argument("--mode", choices=("auto", "direct", "master"), default="auto",
                    help="from storage, through the master, or whichever works (default)")
    _checkpoint_args(sub)


def _checkpoint_args(sub: Any) -> None:
    ck = sub.add_parser("checkpoint", aliases=["c"], help="checkpoints")
    cv = ck.add_subparsers(dest="verb", required=True)
    cl = cv.add_parser("list", aliases=["ls"], help="an experiment's checkpoints")
    cl.add_argument("id", type=int, help="experiment id")
    cl.add_argument("--best", type=int, help="only the best N (by the searcher metric)")
    cl.add_argument("--json", action="store_true")
    rm = cv.add_parser("delete", help="delete checkpoints' files from storage (frees quota)")
    rm.add_argument("uuids", nargs="+", metavar="UUID")
    rm.add_argument("--yes", action="store_true", help="do not ask")
    cd = cv.add_parser("download", help="download a checkpoint's files")
    cd.add_argument("uuid")
    cd.add_argument("-o", "--output", type=Path, help="directory (default checkpoints/UUID)")
    cd.add_argument("--mode", choices=("auto", "direct", "master"), default="auto",
                    help="from storage, through the master, or whichever works (default)")


def _trial_args(sub: Any) -> None:
    t = sub.add_parser("trial", aliases=["t"], help="trials")
    tv = t.add_subparsers(dest="verb", required=True)
    lg = tv.add_parser("logs", help="a trial's logs")
    lg.add_argument("id", type=int)
    lg.add_argument("-f", "--follow", action="store_true")
    lg.add_argument("--rank", type=int, action="append", help="only these ranks (repeatable)")
    lg.add_argument("--tail", type=int)
    lg.add_argument("--json", action="store_true")
    d = tv.add_parser("describe", help="a trial")
    d.add_argument("id", type=int)
    d.add_argument("--json", action="store_true")
    m = tv.add_parser("metrics", help="a trial's metric history: a table, CSV or JSON lines")
    m.add_argument("id", type=int)
    m.add_argument("--group", choices=("training", "validation"), default="training",
                   help="which reports (default: training)")
    form = m.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="CSV: steps,time,<metric...>")
    form.add_argument("--json", action="store_true", help="one JSON object per report")


def _master(args: argparse.Namespace, *, absent_ok: bool = False) -> str:
    """The master of a client command: -m, $DET_MASTER, the state dir's running master, or
    the default; when that is not the obvious one, one line on stderr says which. When none
    of them runs, the error says so (an agent, `absent_ok`, waits for the master instead)."""
    from dettui import master_address, terminal_text
    from dettui.errors import MasterUnreachable

    choice = master_address.choose(args.master, getattr(args, "state_dir", None))
    if choice.note:
        print(terminal_text.message(choice.note), file=sys.stderr, flush=True)
    if choice.absent and not absent_ok:
        raise MasterUnreachable(choice.absent)
    return choice.url


async def _with_client(args: argparse.Namespace,
                       fn: Callable[[api.Client], Awaitable[Any]]) -> Any:
    c = await auth.authenticated(_master(args), args.user, plain=True)
    try:
        return await fn(c)
    finally:
        await c.close()


def _dispatch(args: argparse.Namespace) -> Callable[[api.Client], Awaitable[Any]] | None:
    """The command's action. Each command imports only its own module: the experiment and
    checkpoint commands bring the config schema, pydantic and YAML (0.1 s that `dettui job
    list` does not need)."""
    cmd, verb = args.command, getattr(args, "verb", None)
    if cmd in ("experiment", "e"):
        return _experiment_action(args, verb)
    if cmd in ("checkpoint", "c"):
        from dettui.commands import checkpoint

        if verb == "download":
            return lambda c: checkpoint.download_one(c, args.uuid, args.output, mode=args.mode)
        if verb == "delete":
            return lambda c: checkpoint.delete(c, args.uuids, yes=args.yes)
        return lambda c: checkpoint.list_(c, args.id, best=args.best, as_json=args.json)
    if cmd in ("trial", "t"):
        from dettui.commands import trial

        if verb == "logs":
            return lambda c: trial.logs(c, args.id, follow=args.follow, ranks=args.rank,
                                        tail=args.tail, as_json=args.json)
        if verb == "metrics":
            fmt = "csv" if args.csv else "json" if args.json else "table"
            return lambda c: trial.metrics(c, args.id, group=args.group, fmt=fmt)
        return lambda c: trial.describe(c, args.id, as_json=args.json)
    if cmd == "job":
        return _job_action(args)
    if cmd == "user":
        from dettui.commands import user

        return user.action(args)
    from dettui.commands import cluster

    if cmd == "task":
        return lambda c: cluster.task_list(c, as_json=args.json)
    if cmd == "agent" and args.action in ("enable", "disable"):
        if not args.agent_id:
            raise InvalidArgument(f"dettui agent {args.action} needs an agent id")
        return lambda c: cluster.agent_enable(c, args.agent_id, args.action == "enable")
    if cmd == "agent" and args.action == "token":
        return lambda c: cluster.agent_token(c, args.agent_id, args.credential,
                                             description=args.description, as_json=args.json)
    if cmd == "agent" and args.action:
        return lambda c: cluster.agent_list(c, as_json=args.json)
    return None


def _experiment_action(args: argparse.Namespace,
                       verb: str | None) -> Callable[[api.Client], Awaitable[Any]]:
    from dettui.commands import experiment

    if verb == "create":
        return lambda c: experiment.create(
            c, args.config, args.context, includes=args.include, overrides=args.overrides,
            follow=args.follow, paused=args.paused, as_json=args.json,
            dry_run=args.dry_run)
    if verb in ("list", "ls"):
        return lambda c: experiment.list_(c, show_all=args.all, as_json=args.json)
    if verb == "describe":
        return lambda c: experiment.describe(c, args.id, as_json=args.json)
    if verb == "delete":
        return lambda c: experiment.delete(c, args.id, yes=args.yes)
    if verb == "download":
        from dettui.commands import checkpoint

        return lambda c: checkpoint.download_experiment(c, args.id, args.output,
                                                        top=args.top, mode=args.mode)
    if verb == "set" and args.what == "priority":
        return lambda c: experiment.set_priority(c, args.id, args.priority)
    if verb == "set":
        return lambda c: experiment.set_gc_policy(
            c, args.id, experiment_best=args.save_experiment_best,
            trial_best=args.save_trial_best, trial_latest=args.save_trial_latest,
            yes=args.yes, as_json=args.json)
    return lambda c: experiment.action(c, args.id, verb)


def _job_action(args: argparse.Namespace) -> Callable[[api.Client], Awaitable[Any]]:
    from dettui.commands import cluster

    if args.verb in ("list", "ls"):
        return lambda c: cluster.job_list(c, pool=args.resource_pool, as_json=args.json)
    if args.verb == "update-batch":
        return lambda c: cluster.job_update_batch(c, args.items)
    for key in cluster.UPDATE_KEYS:
        value = getattr(args, key.replace("-", "_"))
        if value is not None:
            return lambda c, k=key, v=value: cluster.job_update(c, args.id, k, v)
    raise InvalidArgument("dettui job update needs one of --priority, --weight, "
                          "--resource-pool, --ahead-of, --behind-of")


def _run(args: argparse.Namespace) -> int:
    if args.command in ("serve", "agent") and not getattr(args, "action", None):
        # The master and agent runtimes: imported only by the commands that run them (they
        # cost a client command such as `dettui job list` 0.3 s of imports).
        from dettui.commands import runtime
    if args.command == "serve" and args.stop:
        return runtime.stop_master(args.state_dir or statedir.default_dir())
    if args.command == "serve":
        from dettui.commands import secret
        from dettui.master import settings as ms

        cfg = ms.load_master_config(args.master_config) if args.master_config else (
            ms.MasterConfig())
        kw = ms.settings_from(cfg, preemption=args.preemption, host=args.host, port=args.port,
                              admin_password=secret.admin_password(
                                  args.admin_password, args.admin_password_file),
                              state_dir=args.state_dir,
                              agent_timeout=args.agent_timeout, db_url=ms.db_url(args.db))
        kw.setdefault("state_dir", statedir.default_dir())
        settings = ms.MasterSettings(**kw)
        asyncio.run(runtime.serve(
            settings, agent=not args.no_agent, agent_slots=args.agent_slots,
            mode=statedir.BACKGROUND if args.background else statedir.SERVE,
            drain_seconds=args.stop_timeout, trials=_sandbox_options(args)))
        return 0
    if args.command == "agent" and not args.action:
        from dettui.agent.agent import AgentOptions
        from dettui.commands import secret

        token = secret.agent_token(args.token, args.token_file)
        agent_id = args.id or socket.gethostname()
        options = AgentOptions(
            master_url=_master(args, absent_ok=True), agent_id=agent_id, pool=args.pool,
            cpu_slots=args.slots, work_root=args.work_dir or runtime.default_work_root(agent_id),
            address=args.address, **_sandbox_options(args))
        asyncio.run(runtime.run_agent(options, token))
        return 0
    if args.command == "user" and args.verb == "login":
        from dettui.commands import user

        asyncio.run(user.login(_master(args), args.username, args.password))
        return 0
    if args.command is None:
        from dettui.commands.dashboard import run_dashboard

        return run_dashboard(args)
    action = _dispatch(args)
    assert action is not None
    if getattr(args, "wide", False):
        from dettui.commands import output

        output.set_wide(True)
    result = asyncio.run(_with_client(args, action))
    return int(result) if isinstance(result, int) else 0


def die(message: str, title: str = "Error") -> int:
    """One red line on stderr (the terminal wraps it, never mid-word by us); the message is
    plain text, never markup. A message that starts with its title is not prefixed again."""
    from rich.text import Text

    from dettui import terminal_text
    from dettui.commands.output import err_console

    message, title = terminal_text.message(message), terminal_text.message(title, 80)
    said_twice = re.fullmatch(r"(\w+) '([^']*)' not found", message)
    if title == "Not found" and said_twice:  # Determined's wire text under our title
        message = f"{said_twice[1]} {said_twice[2]}"
    if message.casefold().startswith(title.casefold()):
        line = Text(message[:1].upper() + message[1:])
        line.stylize("bold red", 0, len(title))
    else:
        line = Text.assemble((f"{title}:", "bold red"), " ", message)
    err_console.print(line, soft_wrap=True, highlight=False)
    return 1


def main(argv: list[str] | None = None) -> int:
    from dettui import terminal_text

    logging.basicConfig(level=os.environ.get("DETTUI_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=[terminal_text.StderrHandler()])
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except DettuiError as exc:
        return die(exc.message, exc.title)
    except KeyboardInterrupt:
        return 130
    finally:
        for stream in (sys.stdout, sys.stderr):  # a reader gone (`| cat` ended by Ctrl-C):
            try:  # Python's own flush at exit would fail with a traceback and exit code 120
                stream.flush()
            except OSError:
                terminal_text.silence(stream)


if __name__ == "__main__":
    sys.exit(main())
