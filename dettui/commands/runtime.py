"""Running the long-lived processes: `dettui serve` (master + local agent) and `dettui agent`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from pathlib import Path

from aiohttp import web

from dettui import client as api
from dettui.agent.agent import Agent, AgentOptions
from dettui.errors import InvalidArgument
from dettui.master import keys
from dettui.master.app import start_master
from dettui.master.settings import MasterSettings
from dettui.master.store import credentials

log = logging.getLogger("dettui")


def _on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


async def serve(settings: MasterSettings, *, agent: bool, agent_slots: int,
                agent_pool: str | None = None) -> None:
    runner, url = await start_master(settings)
    print(f"dettui master listening on {url} (state in {settings.state_dir})", flush=True)
    stop = asyncio.Event()
    _on_signals(stop)
    local: Agent | None = None
    agent_task = None
    if agent:
        local = await embedded_agent(runner, url, settings, agent_slots,
                                     agent_pool or settings.default_pool)
        agent_task = asyncio.create_task(local.run())
    try:
        await stop.wait()
    finally:
        if local is not None and agent_task is not None:
            local.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(agent_task, 20)
            await local.client.close()
        await runner.cleanup()


async def embedded_agent(runner: web.AppRunner, url: str, settings: MasterSettings, slots: int,
                         pool: str) -> Agent:
    """The local agent started inside `dettui serve`, with a credential of its own issued in
    the master's process (bound to its id at once)."""
    db = runner.app[keys.DB]
    agent_id = f"{socket.gethostname()}-local"
    _, secret = await db.run(credentials.issue, None, "the embedded agent", agent_id)
    client = api.Client(url, secret)
    options = AgentOptions(master_url=url, agent_id=agent_id,
                           pool=pool, cpu_slots=slots, work_root=settings.state_dir / "agent",
                           hidden=(settings.state_dir,))  # the master's database is in it
    return Agent(options, client)


async def run_agent(options: AgentOptions, token: str | None) -> None:
    if not token:
        raise InvalidArgument(
            "an agent needs a credential of its own: an admin issues one with `dettui agent "
            "token create`; pass it with --token or DETTUI_AGENT_TOKEN")
    client = api.Client(options.master_url, token)
    agent = Agent(options, client)
    stop = asyncio.Event()
    _on_signals(stop)
    task = asyncio.create_task(agent.run())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    agent.stop()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 20)
    await client.close()


def default_work_root(agent_id: str) -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("dettui")) / f"agent-{agent_id}"
