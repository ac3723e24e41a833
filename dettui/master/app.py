"""The master's aiohttp application factory and runner."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from dettui.master import cycle_collector, master_log, offload, routes
from dettui.master.clock import SYSTEM, Clock
from dettui.master.cluster import Cluster
from dettui.master.groupcommit import GroupCommit
from dettui.master.http import appkeys, middleware
from dettui.master.notifier import Notifier
from dettui.master.settings import MasterSettings, check_exposure
from dettui.master.store import Database, users
from dettui.master.store import agents as agent_store
from dettui.master.store import experiments as exp_store
from dettui.master.store import metrics as metric_store
from dettui.master.tokens import Mint

log = logging.getLogger("dettui.master")
MAX_BODY = 140 * 1024 * 1024  # a 95 MiB context arrives base64-encoded inside JSON
MAX_REPORTS = 2000  # metric reports in one transaction
MAX_CREATIONS = 64  # experiments in one transaction
MAX_CREATION_BYTES = 16 * 2**20  # of their contexts in one transaction (but for the first)


CLOCK: web.AppKey[Clock] = web.AppKey("clock")  # the runtime's time (a test's: ManualClock)


def create_app(settings: MasterSettings, clock: Clock = SYSTEM) -> web.Application:
    """Build the master: store, cluster runtime and routes. Nothing starts until the app runs.
    `clock` is where the runtime's time comes from (liveness, preemption timeouts)."""
    app = web.Application(client_max_size=MAX_BODY,
                          middlewares=[middleware.not_found, middleware.errors,
                                       middleware.auth])
    app[appkeys.SETTINGS] = settings
    app[CLOCK] = clock
    app[appkeys.MASTER_LOG] = master_log.MasterLog()
    app.cleanup_ctx.append(_lifetime)
    routes.setup(app)
    return app


async def _lifetime(app: web.Application) -> AsyncIterator[None]:
    with master_log.kept(app[appkeys.MASTER_LOG]):
        async for _ in _running(app):
            yield


async def _running(app: web.Application) -> AsyncIterator[None]:
    settings = app[appkeys.SETTINGS]
    _private_dir(settings.state_dir)
    _shared_dir(settings.checkpoint_root)
    offload.warm_up("dettui.master.experiment_intake")
    mint = Mint.load(settings.state_dir)
    db = Database(settings.db_target)
    try:  # whatever happens, the store closes (on PostgreSQL: the master lock is let go)
        for suffix in ("", "-wal", "-shm") if settings.db_url is None else ():
            with contextlib.suppress(FileNotFoundError):  # other local users read neither
                os.chmod(f"{settings.db_path}{suffix}", 0o600)  # state nor tokens
        # Before the runtime (and its dispatcher) exists: these commands leave nothing to do.
        made = await db.command(users.ensure_default_users, settings.admin_password)
        check_exposure(settings.host, [u.username for u in await db.run(users.list_, True)
                                       if not u.password_hash])
        known = await db.command(agent_store.cluster_value, "cluster_id", str(uuid.uuid4()))
        assert not made and not known.effects, "a start-up command left effects undone"
        cluster_id = known.value
        notifier = Notifier()
        cluster = Cluster(db, settings, notifier, cluster_id, mint, app[CLOCK])
        app[appkeys.DB] = db
        app[appkeys.MINT] = mint
        app[appkeys.NOTIFIER] = notifier
        app[appkeys.CLUSTER_ID] = cluster_id
        app[appkeys.CLUSTER] = cluster
        app[appkeys.INGEST] = GroupCommit(cluster.dispatcher, metric_store.report_many,
                                          MAX_REPORTS)
        app[appkeys.CREATIONS] = GroupCommit(cluster.dispatcher, exp_store.create_many,
                                             MAX_CREATIONS, _context_bytes, MAX_CREATION_BYTES)
        await cluster.start()
        try:
            async with cycle_collector.old_generation_on_a_timer():
                yield
        finally:
            await cluster.stop()
    finally:
        await asyncio.get_running_loop().run_in_executor(None, db.close)


def _context_bytes(item: tuple[exp_store.NewExperiment, object]) -> int:
    return len(item[0].context or b"")


def _private_dir(path: Path) -> None:
    """The state dir, readable by its owner only (its database, its key, its agent's work)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid():
        path.chmod(0o700)


def _shared_dir(path: Path) -> None:
    """The default checkpoint storage: every trial writes its checkpoints there, each as its
    own Unix user (see dettui/agent/trialuser.py), so the directory is sticky and open to all
    as /tmp is: a trial makes its checkpoint's directory (0700 under the trials' umask) and no
    other user's trial can remove or rename it. The state dir above it stays 0700: a trial
    reaches it only through the sandbox's bind."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid():
        path.chmod(0o1777)


async def start_master(settings: MasterSettings) -> tuple[web.AppRunner, str]:
    """Start listening; return the runner and the URL actually bound (port 0 picks one)."""
    app = create_app(settings)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
    port = sockets[0].getsockname()[1] if sockets else settings.port
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    return runner, f"http://{host}:{port}"
