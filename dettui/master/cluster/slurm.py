"""Resource pools backed by Slurm. Each pool is one agent inside the master whose slots are the
partition's (nodes x slots per node): the scheduler places trials on it as on any agent, and
the messages an agent would long-poll for become Slurm commands instead: a start is one `sbatch`
job (the batch script runs `dettui.agent.slurmpart`, a one-shot agent part, on every node), a
kill is `scancel`. Jobs are read with `scontrol` off the event loop every `poll_seconds`: a
running job is the allocation's heartbeat, an ended one is its exit (with Slurm's reason: time
limit, node failure, an outside scancel), a pending one gives the job queue Slurm's reason.

Every job carries `dettui <cluster id> <allocation id>` as its comment: a restarted master reads
the jobs back before it registers the pool, so it adopts its running jobs (never submits them
twice) and cancels jobs of allocations that have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dettui.errors import DettuiError, Unavailable
from dettui.master import lifecycle, slurmctl
from dettui.master.cluster.dispatcher import Dispatcher
from dettui.master.settings import SlurmPool
from dettui.master.start_messages import build_start
from dettui.master.store import exits
from dettui.master.store import logs as log_store
from dettui.master.store import trials as trial_store
from dettui.master.store.records import Allocation
from dettui.protocol import KillWork, StartWork

log = logging.getLogger("dettui.master.slurm")
COMMAND_TIMEOUT = 60.0
# What sbatch's environment (and so the job's, `--export=ALL`) takes of the master's: never
# its secrets. The node part allow-lists again for the trial, as an agent does.
PASSED = ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "SLURM_CONF", "PYTHONPATH", "VIRTUAL_ENV",
          "DETTUI_TEST_RUN")


class SlurmError(DettuiError):
    title = "Slurm"


async def command(argv: list[str], stdin: str | None = None,
                  env: dict[str, str] | None = None) -> str:
    """Run a Slurm command (a subprocess: the event loop is never blocked) with the passed part
    of the master's environment and `env`; its stdout."""
    full = {k: v for k, v in os.environ.items() if k in PASSED or k.startswith("LC_")}
    full.update(env or {})
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else
            asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=full)
    except OSError as exc:
        raise SlurmError(f"cannot run {argv[0]}: {exc.strerror}") from exc
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), COMMAND_TIMEOUT)
    except TimeoutError as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise SlurmError(f"{argv[0]} did not answer in {COMMAND_TIMEOUT:g} s") from exc
    if proc.returncode != 0:
        raise SlurmError(f"{argv[0]} failed ({proc.returncode}): "
                         f"{err.decode(errors='replace').strip()[:500]}")
    return out.decode(errors="replace")


class SlurmProvider:
    """One Slurm-backed pool."""

    def __init__(self, dispatcher: Dispatcher, pool: SlurmPool,
                 register: Callable[..., Awaitable[Any]],
                 heartbeat: Callable[..., Awaitable[None]]) -> None:
        """`register` and `heartbeat` are the agents' (`Agents.register`, `.heartbeat`): the
        pool takes part as an agent that lives in the master."""
        self.dispatcher = dispatcher
        self.db = dispatcher.db
        self.clock = dispatcher.clock
        self.register = register
        self.heartbeat = heartbeat
        self.pool = pool
        self.held: dict[int, str] = {}  # trial -> why its Slurm job pends
        self.agent_id = f"slurm-{pool.pool}"
        self.jobs: dict[str, str] = {}  # allocation -> Slurm job id (submitted or seen)
        self._since: dict[str, float] = {}  # allocation -> when its job was first known
        self.registered = False
        self._inbox: asyncio.Queue[StartWork | KillWork] = asyncio.Queue()
        self._complained = ""

    @property
    def work_dir(self) -> Path:
        return self.pool.work_dir or self.dispatcher.settings.state_dir / "slurm"

    async def run(self) -> None:
        """Poll the jobs (and register the pool once Slurm answers); perform the messages."""
        worker = asyncio.create_task(self._perform_loop())
        try:
            while True:
                link = self.dispatcher.agents.get(self.agent_id)
                if link is not None:
                    link.last_seen = self.clock.monotonic()  # this "agent" lives in the master
                try:
                    await self.poll()
                    self._complained = ""
                except SlurmError as exc:
                    if str(exc) != self._complained:
                        log.warning("pool %s: %s", self.pool.pool, exc)
                    self._complained = str(exc)
                await asyncio.sleep(self.pool.poll_seconds)
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    async def poll(self) -> None:
        taken = self.clock.monotonic()  # a job submitted after this may be missing from the answer
        jobs = {j.allocation_id: j for j in slurmctl.parse_jobs(
            await command(["scontrol", "show", "job", "-o"]), self.dispatcher.cluster_id)}
        for alloc_id, job in jobs.items():
            if not job.state.is_terminal() and alloc_id not in self.jobs:
                self._know(alloc_id, job.job_id)
        mine = [a for a in await self.db.run(trial_store.live_allocations)
                if self.agent_id in a.agents and self.agent_id not in a.part_exits]
        await self._settle(mine, jobs, taken)
        running = [a for a, j in jobs.items() if j.state.is_running()
                   or j.state is slurmctl.JobState.COMPLETING]
        if not self.registered:
            await self._register(running)
        else:
            await self.heartbeat(self.agent_id, running, None)
        self._hold(mine, jobs)

    async def _register(self, running: list[str]) -> None:
        nodes = slurmctl.partition_nodes(await command(
            ["scontrol", "show", "partition", self.pool.partition, "-o"]))
        if nodes < 1:
            raise SlurmError(f"partition {self.pool.partition} has no nodes")
        slots = [{"id": i, "type": "cpu", "uuid": None, "brand": "slurm"}
                 for i in range(nodes * self.pool.slots_per_node)]
        await self.register(self.agent_id, self.pool.pool, slots,
                                   f"slurm:{self.pool.partition}", [], running)
        link = self.dispatcher.agents.get(self.agent_id)
        assert link is not None
        link.sink = self._inbox.put_nowait
        for message in link.outbox:  # what registering sent before the sink was set
            self._inbox.put_nowait(message)
        link.outbox = []
        self.registered = True
        log.info("pool %s: Slurm partition %s with %d node(s) x %d slot(s); %d job(s) "
                 "adopted", self.pool.pool, self.pool.partition, nodes,
                 self.pool.slots_per_node, len(running))

    async def _settle(self, mine: list[Allocation], jobs: dict[str, slurmctl.Job],
                      taken: float) -> None:
        """Allocations of this pool whose job has ended (or that Slurm no longer knows, or that
        were killed before a job was submitted) exit, with Slurm's reason."""
        for alloc in mine:
            job = jobs.get(alloc.id)
            if job is not None and job.state.is_terminal():
                code, reason = job.outcome()
                if alloc.kill_requested and reason:
                    reason = lifecycle.KILLED
                await self._exit(alloc, code, reason, f"Slurm job {job.job_id} ended "
                                 f"{job.state.value} (exit code {job.exit_code}:{job.signal})")
            elif job is None and alloc.id not in self.jobs and alloc.kill_requested:
                await self._exit(alloc, None, lifecycle.KILLED, "killed before it was submitted")
            elif job is None and self._since.get(alloc.id, taken) < taken:
                await self._exit(alloc, None, lifecycle.LOST,
                                 f"Slurm job {self.jobs[alloc.id]} is no longer known to Slurm")

    async def _exit(self, alloc: Allocation, code: int | None, reason: str, what: str) -> None:
        log.info("allocation %s: %s", alloc.id, what)
        trial = await self.db.run(trial_store.get, alloc.trial_id)
        await self._part_exit(alloc.id, code, reason)
        self.jobs.pop(alloc.id, None)
        self._since.pop(alloc.id, None)
        # The trial's log says why it ended (after the commit of the exit; seq makes it once).
        await self.dispatcher.run(log_store.insert, [{
            "trial_id": trial.id, "task_id": trial.task_id, "allocation_id": alloc.id,
            "agent_id": self.agent_id, "container_id": alloc.container_id(self.agent_id),
            "rank_id": None, "stdtype": "stderr", "source": "master", "level": "INFO",
            "timestamp": self.clock.wall(), "log": f"{what}\n", "seq": -1}])

    async def _part_exit(self, alloc_id: str, code: int | None, reason: str) -> None:
        """The pool's part of the allocation ended (`exits.part_exit`, as an agent's does)."""
        await self.dispatcher.run(exits.part_exit, alloc_id, self.agent_id, code, reason,
                                  self.dispatcher.agents.ids())

    def _hold(self, mine: list[Allocation], jobs: dict[str, slurmctl.Job]) -> None:
        """The job queue shows why pending Slurm jobs wait."""
        held = {}
        for alloc in mine:
            job = jobs.get(alloc.id)
            why = job.pending_reason() if job is not None else None
            if why is not None:
                held[alloc.trial_id] = why
        if held != self.held:
            self.held = held
            self.dispatcher.notify("jobs")

    # --- messages -------------------------------------------------------------------------

    async def _perform_loop(self) -> None:
        while True:
            message = await self._inbox.get()
            try:
                if isinstance(message, StartWork):
                    await self._submit(message)
                else:
                    await self._cancel(message)
            except Exception:  # noqa: BLE001 - one failed command must not stop the pool
                log.exception("pool %s: %s of %s failed", self.pool.pool, message.kind,
                              message.allocation_id)

    async def _submit(self, start: StartWork) -> None:
        if start.allocation_id in self.jobs:
            return  # submitted already (a start sent again), or adopted after a restart
        url = self.pool.master_url or self.dispatcher.url
        if url is None:
            raise Unavailable("the master's URL is not known yet")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        sub = slurmctl.Submission(
            self.pool.partition, start.allocation_id, self.dispatcher.cluster_id, len(start.slots),
            self.pool.slots_per_node, self.pool.python or sys.executable,
            str(self.work_dir / "slurm-%j.out"), self.pool.sbatch_args)
        env = {"DETTUI_SLURM_MASTER": url, "DETTUI_SLURM_ALLOCATION": start.allocation_id,
               "DETTUI_SLURM_TOKEN": start.session_token,
               "DETTUI_SLURM_WORK": str(self.work_dir),
               "DETTUI_SLURM_SLOTS_PER_NODE": str(self.pool.slots_per_node)}
        try:
            out = await command(sub.argv(), sub.script(), env)
        except SlurmError as exc:
            await self._part_exit(start.allocation_id, None,
                                             f"slurm: sbatch failed: {exc}")
            return
        self._know(start.allocation_id, slurmctl.parse_submitted(out))
        log.info("allocation %s: Slurm job %s submitted (%d node(s))", start.allocation_id,
                 self.jobs[start.allocation_id], sub.nodes)

    def _know(self, alloc_id: str, job_id: str) -> None:
        self.jobs[alloc_id] = job_id
        self._since[alloc_id] = self.clock.monotonic()

    async def _cancel(self, kill: KillWork) -> None:
        job = self.jobs.get(kill.allocation_id)
        if job is None:
            return  # not submitted: `_settle` ends it
        log.info("allocation %s: cancelling Slurm job %s (%s)", kill.allocation_id, job,
                 kill.reason)
        # SIGTERM to every process of the job (the node parts end their trees and ship their
        # last lines), SIGKILL after Slurm's KillWait.
        await command(["scancel", job])

    async def start_message(self, alloc: Allocation) -> StartWork:
        """The start message of an allocation of this pool, for its nodes' parts."""
        link = self.dispatcher.agents.get(self.agent_id)
        if link is None:
            raise Unavailable(f"pool {self.pool.pool} is not connected to Slurm yet")
        d = self.dispatcher
        return await self.db.call(build_start, self.db.conn, alloc, link.agent, {},
                                  d.cluster_id, d.settings, d.mint)
