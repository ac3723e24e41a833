"""Running the long-lived processes: `dettui serve` (master + local agent) and `dettui agent`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from dettui import client as api
from dettui import statedir, terminal_text
from dettui.agent.agent import Agent, AgentOptions
from dettui.errors import (
    AddressInUse,
    DettuiError,
    InvalidArgument,
    MasterRunning,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from dettui.master.app import start_master
from dettui.master.http import appkeys
from dettui.master.settings import MasterSettings
from dettui.master.store import credentials
from dettui.master.store.pg import redact
from dettui.protocol import RegisterAgentBody, Registered

log = logging.getLogger("dettui")


DRAIN_SECONDS = 60.0  # how long running trials get to checkpoint and stop on `serve --stop`


def _on_signals(stop: asyncio.Event, drain: asyncio.Event | None = None,
                force: asyncio.Event | None = None) -> None:
    """SIGTERM stops at once. SIGUSR1 (sent by `dettui serve --stop` and the dashboard's "stop
    everything") lets running trials checkpoint and stop first; so does SIGINT (Ctrl-C) when
    the master drains (`drain` given): a second SIGINT stops at once (sets `force`). Without
    `drain` (an agent), SIGINT stops at once too."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)  # a Unix loop: dettui needs fcntl, unshare
    if drain is None:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        return

    def graceful() -> None:
        drain.set()
        stop.set()

    def interrupted() -> None:
        if not drain.is_set():
            graceful()
            terminal_text.say("\nstopping: running trials checkpoint and stop first (Ctrl-C "
                              "again to stop now)")
        elif force is not None and not force.is_set():
            force.set()
            terminal_text.say("\nstopping now: running trials are stopped without a checkpoint")

    loop.add_signal_handler(signal.SIGUSR1, graceful)
    loop.add_signal_handler(signal.SIGINT, interrupted)


async def serve(settings: MasterSettings, *, agent: bool, agent_slots: int | None,
                agent_pool: str | None = None, mode: str = statedir.SERVE,
                drain_seconds: float = DRAIN_SECONDS,
                trials: dict[str, Any] | None = None) -> None:
    """The master (and a local agent) until a signal; one per state dir. `mode` BACKGROUND:
    started by a dashboard, so a busy port 8080 falls back to a free one."""
    statedir.check_own(settings.state_dir)
    lock = statedir.StateLock(settings.state_dir)
    if not lock.acquire():
        raise _running(settings.state_dir)
    try:
        await _serve_locked(settings, lock, agent=agent, agent_slots=agent_slots,
                            agent_pool=agent_pool, mode=mode, drain_seconds=drain_seconds,
                            trials=trials or {})
    finally:
        lock.release()


async def _serve_locked(settings: MasterSettings, lock: statedir.StateLock, *, agent: bool,
                        agent_slots: int | None, agent_pool: str | None, mode: str,
                        drain_seconds: float, trials: dict[str, Any]) -> None:
    runner, url = await listen(settings, any_port=mode == statedir.BACKGROUND)
    lock.publish(url, mode)
    runner.app[appkeys.CLUSTER].advertise(url)
    print(f"dettui master listening on {url} (state in {settings.state_dir}"
          f"{'' if settings.db_url is None else ', store in ' + redact(settings.db_url)})",
          flush=True)
    stop, drain, force = asyncio.Event(), asyncio.Event(), asyncio.Event()
    _on_signals(stop, drain, force)
    local: Agent | None = None
    agent_task = None
    pool = local_pool(settings, agent_pool) if agent else None
    if pool is not None:
        try:
            local = await embedded_agent(runner, url, settings, agent_slots, pool, trials)
            agent_task = asyncio.create_task(local.run())
            agent_task.add_done_callback(_agent_ended)
        except PermissionDenied as exc:  # an admin's credential holds the local agent's id
            print(f"no local agent: {exc.message}", flush=True)
    elif agent:
        print("no local agent: every resource pool of the master config is backed by Slurm",
              flush=True)
    try:
        await stop.wait()
        if drain.is_set():
            await _drain(runner, drain_seconds, force)
    finally:
        if local is not None and agent_task is not None:
            local.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(agent_task, 20)
            await local.client.close()
        await runner.cleanup()


async def _drain(runner: web.AppRunner, seconds: float, force: asyncio.Event) -> None:
    """Running trials checkpoint and stop (up to `seconds`), unless `force` is set first (a
    second Ctrl-C): then the master stops at once, as on SIGTERM."""
    draining = asyncio.ensure_future(runner.app[appkeys.CLUSTER].drain(seconds))
    forced = asyncio.ensure_future(force.wait())
    await asyncio.wait([draining, forced], return_when=asyncio.FIRST_COMPLETED)
    forced.cancel()
    if draining.done():
        log.info("stopped on request; %d running trial(s) checkpointed and requeued",
                 draining.result())
        return
    draining.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await draining
    log.warning("stopped at once on a second Ctrl-C: running trials did not checkpoint")


def local_pool(settings: MasterSettings, asked: str | None) -> str | None:
    """The pool the embedded agent joins: the one asked for, else the default pool, else the
    first pool that Slurm does not back; None when Slurm backs every pool. A Slurm pool's
    slots are its partition's, so a local agent never joins one."""
    if asked is not None:
        if asked in settings.slurm:
            raise InvalidArgument(f"pool '{asked}' is backed by Slurm: a local agent cannot "
                                  f"join it")
        return asked
    if settings.default_pool not in settings.slurm:
        return settings.default_pool
    return next((p for p in settings.pools if p not in settings.slurm), None)


def _running(state_dir: Path) -> MasterRunning:
    found = statedir.holder(state_dir, wait=3.0)
    if found is None:
        return MasterRunning(f"another master is starting on {state_dir}; try again in a moment")
    return MasterRunning(
        f"a master already runs on {state_dir}: {found.url} (pid {found.pid}). `dettui "
        f"--state-dir {state_dir}` attaches to it; `dettui serve --stop --state-dir "
        f"{state_dir}` stops it.")


async def listen(settings: MasterSettings, *, any_port: bool = False) -> tuple[web.AppRunner,
                                                                                str]:
    """Start the master; a busy port is an error naming the process that holds it (when it can
    be known), or with `any_port`, a reason to take a free one instead."""
    try:
        return await start_master(settings)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        if any_port and settings.port != 0:
            return await start_master(replace(settings, port=0))
        who = port_holder(settings.port)
        raise AddressInUse(
            f"cannot listen on {settings.host}:{settings.port}: the port is in use"
            + (f" by {who}" if who else "") + "; pick another with --port (0: any free one)"
        ) from exc


def port_holder(port: int) -> str | None:
    """`name (pid N)` of the process listening on `port`, if this user may see it."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port \
                and conn.pid:
            try:
                name = " ".join(psutil.Process(conn.pid).cmdline()[:3]) or str(conn.pid)
            except psutil.Error:
                name = "a process"
            return f"{name} (pid {conn.pid})"
    return None


def stop_master(state_dir: Path, timeout: float = DRAIN_SECONDS + 60) -> int:
    """`dettui serve --stop`: ask the master of `state_dir` to let its running trials
    checkpoint and stop, then to exit; wait until it has."""
    found = statedir.holder(state_dir)
    if found is None:
        print(f"no master runs on {state_dir}")
        return 0
    why = found.ours()
    if why is not None:
        raise PermissionDenied(f"not signalling pid {found.pid}, named by "
                               f"{state_dir / statedir.LOCK}: {why}")
    print(f"stopping the master at {found.url} (pid {found.pid}): running trials checkpoint "
          "and stop first", flush=True)
    os.kill(found.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while statedir.holder(state_dir, wait=0) is not None:
        if time.monotonic() > deadline:
            raise Unavailable(f"the master (pid {found.pid}) did not stop in {timeout:.0f} s; "
                              f"`kill {found.pid}` stops it at once")
        time.sleep(0.2)
    print("the master has stopped")
    return 0


def _agent_ended(task: asyncio.Task[None]) -> None:
    """The embedded agent stopped by itself (it cannot run trials here): said where the user
    looks, the master goes on."""
    if not task.cancelled() and isinstance(task.exception(), DettuiError):
        exc = task.exception()
        assert isinstance(exc, DettuiError)
        log.error("no local agent: %s", exc.message)
        terminal_text.say(f"no local agent: {exc.message}")


async def embedded_agent(runner: web.AppRunner, url: str, settings: MasterSettings,
                         slots: int | None, pool: str,
                         trials: dict[str, Any] | None = None) -> Agent:
    """The local agent started inside `dettui serve`, with a credential of its own issued in
    the master's process (bound to its id at once; the master's credential of its previous
    start is revoked, so after a restart on the same state dir the id is the new one's)."""
    agent_id = f"{socket.gethostname()}-local"
    issued = await runner.app[appkeys.CLUSTER].dispatcher.run(
        credentials.issue_for_master, agent_id, "the embedded agent")
    assert issued is not None
    _, secret = issued
    client = api.Client(url, secret)
    options = AgentOptions(master_url=url, agent_id=agent_id,
                           pool=pool, cpu_slots=slots, work_root=settings.state_dir / "agent",
                           hidden=(settings.state_dir,),  # the master's database is in it
                           exposed=(settings.checkpoint_root,), **(trials or {}))
    return Agent(options, client)


class Refused(Exception):  # not a DettuiError, on purpose (see AgentClient)
    """The master refused the agent's credential at registration."""

    def __init__(self, error: DettuiError) -> None:
        super().__init__(error.message)
        self.error = error


class AgentClient(api.Client):
    """The client of `dettui agent`: a registration refused for the credential (revoked, or
    bound to another agent id, or the id bound to another credential) ends the agent with the
    master's message, since asking again cannot help. The agent retries every DettuiError,
    so the refusal leaves it as another exception."""

    async def register_agent(self, body: RegisterAgentBody) -> Registered:
        try:
            return await super().register_agent(body)
        except (PermissionDenied, Unauthenticated) as exc:
            raise Refused(exc) from exc


async def run_agent(options: AgentOptions, token: str | None) -> None:
    if not token:
        raise InvalidArgument(
            "an agent needs a credential of its own: an admin issues one with `dettui agent "
            "token create`; pass it with --token-file PATH or DETTUI_AGENT_TOKEN")
    client = AgentClient(options.master_url, token)
    agent = Agent(options, client)
    stop = asyncio.Event()
    _on_signals(stop)
    task = asyncio.create_task(agent.run())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    agent.stop()
    waiter.cancel()
    try:
        await asyncio.wait_for(task, 20)
    except Refused as exc:
        raise PermissionDenied(f"the master refused agent {options.agent_id}: "
                               f"{exc.error.message}") from exc
    except DettuiError:  # it cannot run trials here (no sandbox): the user's to see
        raise
    except Exception:  # noqa: BLE001 - stopping: the agent logged what went wrong
        pass
    finally:
        await client.close()


def default_work_root(agent_id: str) -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("dettui")) / f"agent-{agent_id}"
