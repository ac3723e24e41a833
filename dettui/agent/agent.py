"""The agent: register with the master, heartbeat, long-poll for work, run allocations."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dettui import paths, retry, telemetry
from dettui.agent import forkpool, process, sandbox, spool, trialuser
from dettui.agent.allocation import AllocationRun, allowed, ship
from dettui.auth import token_path
from dettui.client import Client
from dettui.errors import DettuiError, Gone, NotFound
from dettui.protocol import (
    AgentSlot,
    AllocationExitBody,
    HeartbeatBody,
    KillWork,
    RegisterAgentBody,
    StartWork,
)

log = logging.getLogger("dettui.agent")
SAMPLE_SECONDS = 1.0
TELEMETRY_SECONDS = 2.0  # heartbeats (which carry telemetry) come at least this often
SAMPLES_KEPT = 30  # telemetry kept while the master is unreachable
POLL_SECONDS = 30.0
LEFTOVER_SECONDS = 5.0  # between looks for log lines left to ship
STARTED = ".started"  # under the work root: one empty file per allocation this agent started
LOST = "lost"  # the exit reason of an allocation whose agent restarted while it ran


@dataclass(frozen=True)
class AgentOptions:
    master_url: str
    agent_id: str
    pool: str = "default"
    cpu_slots: int | None = 1  # None: one per CPU core
    work_root: Path = Path("agent-work")
    token: str | None = None
    address: str | None = None  # what peers use to reach this machine (rendezvous)
    hidden: tuple[Path, ...] = ()  # paths trials must not read (besides the work root)
    exposed: tuple[Path, ...] = ()  # inside `hidden`, but trials may use them (checkpoints)
    trial_user: str = trialuser.PER_USER  # a root agent's trials of unlinked owners run as it
    no_sandbox: bool = False  # run trials even where no sandbox can be made (said loudly)
    nproc: int | None = sandbox.DEFAULT_NPROC  # RLIMIT_NPROC of a trial's user; None: none
    trial_start: str | None = None  # fork or fresh (None: $DETTUI_TRIAL_START, else fork)


def _my_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def discover_slots(cpu_slots: int | None) -> tuple[list[dict[str, Any]], str | None]:
    """One slot per NVIDIA GPU; else `cpu_slots` CPU slots (None: one per core) and a note
    saying why."""
    gpus, why = telemetry.detect_gpus()
    if gpus:
        return [{"id": g.index, "type": "cuda", "uuid": g.uuid, "brand": g.name}
                for g in gpus], None
    if cpu_slots is None:
        cpu_slots = cpu_cores()
    slots = [{"id": i, "type": "cpu", "uuid": None, "brand": "cpu"} for i in range(cpu_slots)]
    return slots, f"{why}; offering {cpu_slots} CPU slot{'s' if cpu_slots != 1 else ''}"


class Agent:
    def __init__(self, options: AgentOptions, client: Client) -> None:
        self.options = options
        self.client = client
        self.id = options.agent_id
        self.slots, self.note = discover_slots(options.cpu_slots)
        self.gpu_indices = [int(s["id"]) for s in self.slots if s["type"] == "cuda"]
        self.runs: dict[str, AllocationRun] = {}
        self.started: set[str] = set()  # allocations this process started
        self.finished: dict[str, tuple[int | None, str]] = {}
        self.own_pids: set[int] = set()
        self.heartbeat_seconds = 2.0
        self.samples: list[dict[str, Any]] = []  # telemetry since the last heartbeat
        self.latest_sample: dict[str, Any] | None = None
        self._usage: dict[str, telemetry.TreeUsage] = {}  # by allocation id
        self._stopping = asyncio.Event()
        self._registered = asyncio.Event()
        self._supervisors: set[asyncio.Task[None]] = set()
        self.trial_user: trialuser.TrialUser | None = None  # None: trials run as this process
        self.sandbox_note: str | None = None
        self.reach_problem: str | None = None  # why the default trial user cannot run trials
        self.per_user = options.trial_user == trialuser.PER_USER
        self.forks: forkpool.Pool | None = None  # fork servers (None: trials start fresh)
        self.contexts: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self._markers: Path | None = None  # the directory of markers, resolved (`_marker`)

    async def run(self) -> None:
        process.become_subreaper()
        self.options.work_root.mkdir(parents=True, exist_ok=True)
        if self.options.work_root.stat().st_uid == os.geteuid():
            # other allocations' work, spools and logs: closed by its mode, not only by mounts
            self.options.work_root.chmod(0o700)
        left = await asyncio.to_thread(process.strays, self.id)
        if left:
            log.warning("agent %s: ending %d process(es) left by its previous run", self.id,
                        len(left))
            await asyncio.to_thread(process.terminate, left, self.own_pids, 2.0)
        if self.note:
            log.warning("agent %s: %s", self.id, self.note)
        support = await asyncio.to_thread(sandbox.probe)  # once: the result is kept
        refusal = sandbox.refused(support, self.options.no_sandbox)
        if refusal is not None:
            raise DettuiError(f"agent {self.id}: {refusal}")
        self.sandbox_note = sandbox.off_note(support, self.options.no_sandbox)
        if self.sandbox_note:
            log.warning("agent %s: %s", self.id, self.sandbox_note)
        if support.root:
            self.trial_user = (trialuser.per_user(0) if self.per_user
                               else trialuser.named(self.options.trial_user))
            await asyncio.to_thread(self._check_reach, support)
        if forkpool.mode(self.options.trial_start) == "fork":
            marks = {process.AGENT_MARK: self.id, process.INSTANCE_MARK: process.instance()}
            if process.TEST_MARK in os.environ:
                marks[process.TEST_MARK] = os.environ[process.TEST_MARK]
            self.forks = forkpool.Pool(sandbox.stage_environment(marks), self.own_pids,
                                       {k: v for k, v in os.environ.items() if allowed(k)})
            if not (support.root and self.per_user):  # one user runs every trial: warm now
                self.forks.warm(self.trial_user.uid if self.trial_user is not None else None)
        (self.options.work_root / STARTED).mkdir(exist_ok=True)
        await self._register()
        tasks = [asyncio.create_task(self._report_lost_by_earlier_run()),
                 asyncio.create_task(self._heartbeat_loop()),
                 asyncio.create_task(self._sample_loop()),
                 asyncio.create_task(self._work_loop()),
                 asyncio.create_task(self._leftovers_loop())]
        try:
            await self._stopping.wait()
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await self._shutdown()

    def stop(self) -> None:
        self._stopping.set()

    def _trial_user(self, start: StartWork) -> trialuser.TrialUser | None:
        """Whom a trial runs as unless its owner is linked: its owner's own uid, or the user
        --trial-user names (None: this agent is not root, trials run as itself)."""
        if self.trial_user is not None and self.per_user and start.owner_id is not None:
            return trialuser.per_user(start.owner_id)
        return self.trial_user

    def _sandbox_summary(self) -> str:
        """How this agent runs trials, for `agent list`."""
        if self.sandbox_note:
            return "OFF (--no-sandbox)"
        if self.trial_user is None:  # not root: a user namespace, as this process's user
            return f"sandboxed, as {_my_name()} (user namespace)"
        who = "a uid per user" if self.per_user else self.trial_user.name
        return f"sandboxed, as {who}" + (
            " (cannot run them!)" if self.reach_problem else "")

    def _check_reach(self, support: sandbox.Support) -> None:
        """Say at start, naming the path and the user, when the default trial user cannot run
        what every trial needs (the Python and dettui), rather than every trial failing later."""
        user = self.trial_user
        assert user is not None
        if user.root:
            log.warning("agent %s: trials of unlinked users run as root (--trial-user root), "
                        "without capabilities", self.id)
        why = sandbox.reach(support, user, self.options.hidden)
        if why is None:
            log.info("agent %s: trials of unlinked users run as %s", self.id, (
                f"per-user uids dettui-N ({trialuser.PER_USER_BASE}+N, N the user's id)"
                if self.per_user else user.describe()))
        else:
            log.error("agent %s: %s", self.id, why)
            self.reach_problem = why

    async def _register(self) -> None:
        waits = retry.delays()
        while not self._stopping.is_set():
            try:
                registered = await self.client.register_agent(RegisterAgentBody(
                    id=self.id, resource_pool=self.options.pool,
                    slots=[AgentSlot.model_validate(s) for s in self.slots],
                    hostname=socket.gethostname(),
                    addresses=[self.options.address] if self.options.address
                    else _addresses(self.options.master_url),
                    running_allocations=list(self.runs),
                    no_gpu_reason=None if self.gpu_indices else self.note,
                    sandbox=self._sandbox_summary()))
                self.heartbeat_seconds = registered.heartbeat_seconds
                self._registered.set()
                log.info("agent %s registered in pool %s with %d slot(s)", self.id,
                         self.options.pool, len(self.slots))
                return
            except DettuiError as exc:
                log.warning("agent %s: cannot register yet (%s); retrying", self.id, exc)
                await asyncio.sleep(next(waits))

    def _marker(self, alloc_id: str) -> Path:
        """The file that says this agent started `alloc_id`: one name in its own directory of
        markers, which only the agent writes (the work root is 0700), resolved once (resolving
        both paths three times a trial was 3 % of the loop's time in the search benchmark)."""
        if self._markers is None:
            self._markers = (self.options.work_root / STARTED).resolve()
        return self._markers / paths.component(alloc_id, "allocationId")

    async def _report_lost_by_earlier_run(self) -> None:
        """Allocations an earlier run of this agent started (it was killed) are lost: their
        processes were swept, so the master is told at once rather than after the agent timeout,
        and they are never run again under the same id (their log sequence numbers and spool
        belong to the first run)."""
        for marker in sorted((self.options.work_root / STARTED).iterdir()):
            if marker.name not in self.runs:
                log.warning("agent %s: allocation %s was running when this agent last stopped; "
                            "reporting it lost", self.id, marker.name)
                await self._report(marker.name, None, LOST)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self.heartbeat_seconds, TELEMETRY_SECONDS))
            process.reap_orphans(self.own_pids)
            samples, self.samples = self.samples, []
            try:
                await self.client.agent_heartbeat(self.id, HeartbeatBody(
                    running_allocations=list(self.runs), telemetry=self.latest_sample,
                    samples=samples))
            except Gone as exc:
                await self._gone(exc)
            except NotFound:
                await self._register()
            except DettuiError as exc:
                log.warning("agent %s: heartbeat failed: %s", self.id, exc)
            except Exception:  # noqa: BLE001 - the heartbeat must go on
                log.exception("agent %s: heartbeat failed", self.id)

    async def _gone(self, exc: Gone) -> None:
        """The master declared this agent lost (it was stopped, or cut off, for longer than
        the agent timeout) and gave its allocations to other agents: the copies here end at
        once, before the agent registers again (the master refuses their reports anyway)."""
        if self.runs:
            log.warning("agent %s: %s; ending %d allocation(s)", self.id, exc, len(self.runs))
            why = "the master declared this agent lost; the allocation runs elsewhere now"
            await asyncio.gather(*(run.kill(why) for run in list(self.runs.values())),
                                 return_exceptions=True)
        await self._register()

    async def _leftovers_loop(self) -> None:
        """Ship the log lines that allocations which are no longer running left in their
        spools (the master was away when they ended, or this agent was killed)."""
        directory = self.options.work_root / spool.DIRECTORY
        while True:
            try:
                for path, lines in await asyncio.to_thread(spool.leftovers, directory,
                                                           self.runs, self.started):
                    if await ship(self.client, self.id, lambda n, q=lines: q[:n],
                                  lambda upto, q=lines: _drop_upto(q, upto), LEFTOVER_SECONDS):
                        path.unlink(missing_ok=True)
            except Exception:  # noqa: BLE001 - shipping old lines must never stop the agent
                log.exception("agent %s: shipping leftover log lines failed", self.id)
            await asyncio.sleep(LEFTOVER_SECONDS)

    async def _sample_loop(self) -> None:
        """Telemetry every second (NVML when present, psutil always), shipped in batches with
        the heartbeat."""
        while True:
            try:
                sample = await asyncio.to_thread(self._sample)
                self.samples = [*self.samples[-(SAMPLES_KEPT - 1):], sample]
                self.latest_sample = sample
            except Exception:  # noqa: BLE001 - telemetry must never stop the agent
                log.exception("agent %s: telemetry sample failed", self.id)
            await asyncio.sleep(SAMPLE_SECONDS)

    def _sample(self) -> dict[str, Any]:
        """One telemetry sample (`telemetry.sample_host`) plus `allocations`: for each running
        allocation (from its second look on), the CPU % and RSS of its processes and, on its
        GPUs, their SM utilisation and memory (protocol.AllocationUsage). Its processes are
        its root and those its run has found (`AllocationRun.known`): no scan of /proc."""
        gpus = telemetry.sample_gpus(self.gpu_indices)
        sample = telemetry.sample_host(self.gpu_indices, gpus)
        usage = {}
        runs = dict(self.runs)  # this runs on a thread: the loop may change `runs` meanwhile
        for alloc_id, run in runs.items():
            procs = run.processes()
            measured = self._usage.setdefault(alloc_id, telemetry.TreeUsage()).measure(procs)
            if measured is None:
                continue
            util, memory = telemetry.allocation_gpu(gpus, run.spec.cuda_devices,
                                                    {p.pid for p in procs})
            usage[alloc_id] = {**measured, "gpuUtil": util, "gpuMemory": memory}
        for gone in self._usage.keys() - runs.keys():
            del self._usage[gone]
        sample["allocations"] = usage
        return sample

    async def _work_loop(self) -> None:
        while True:
            try:
                work = await self.client.agent_work(self.id, POLL_SECONDS)
            except ValidationError as exc:  # a master this agent does not understand
                log.error("agent %s: unreadable work from the master: %s", self.id, exc)
                await asyncio.sleep(POLL_SECONDS / 10)
                continue
            except Gone as exc:
                await self._gone(exc)
                continue
            except NotFound:
                await self._register()
                continue
            except DettuiError as exc:
                log.warning("agent %s: work poll failed: %s", self.id, exc)
                await asyncio.sleep(1.0)
                continue
            for item in work:
                try:
                    await self._handle(item)
                except Exception:  # noqa: BLE001 - one bad item must not stop all work
                    log.exception("agent %s: handling %s failed", self.id, item.kind)

    async def _handle(self, item: StartWork | KillWork) -> None:
        alloc_id = item.allocation_id
        if isinstance(item, StartWork):
            if alloc_id in self.runs:
                return
            if alloc_id in self.finished:
                await self._report(alloc_id, *self.finished[alloc_id])
                return
            if self._marker(alloc_id).exists():  # sent again to this agent's next run
                await self._report(alloc_id, None, LOST)
                return
            try:
                self._marker(alloc_id).touch()
            except OSError as exc:  # a full disk: nothing of it can start here
                await self._report(alloc_id, None, f"agent error: cannot start it: {exc}")
                return
            self.started.add(alloc_id)  # before its spool exists: see spool.leftovers
            run = AllocationRun(item, self.client, self.id, self.options.work_root,
                                self.options.master_url, self.own_pids,
                                (*self.options.hidden, token_path().parent),
                                self.options.exposed, self._trial_user(item),
                                self.options.nproc, self.forks, self.contexts)
            self.runs[alloc_id] = run
            self._supervisors.add(asyncio.create_task(self._supervise(run)))
        else:
            run = self.runs.get(alloc_id)
            if run is not None:
                await run.kill(item.reason)
            else:
                await self._kill_stray(alloc_id)

    async def _kill_stray(self, alloc_id: str) -> None:
        procs = await asyncio.to_thread(process.members, None, alloc_id, ())
        if procs:
            await asyncio.to_thread(process.terminate, procs, self.own_pids, 5.0)

    async def _supervise(self, run: AllocationRun) -> None:
        try:
            code, reason = await run.run()
        except Exception as exc:  # noqa: BLE001 - report, never lose the exit
            log.exception("allocation %s crashed in the agent", run.id)
            code, reason = None, f"agent error: {exc}"
        self.finished[run.id] = (code, reason)
        try:
            await self._report(run.id, code, reason)
        finally:
            self.runs.pop(run.id, None)
            await asyncio.to_thread(run.cleanup)
            task = asyncio.current_task()
            if task is not None:
                self._supervisors.discard(task)  # type: ignore[arg-type]

    async def _report(self, alloc_id: str, code: int | None, reason: str) -> None:
        waits = retry.delays()
        while True:
            try:
                await self.client.allocation_exit(
                    self.id, alloc_id, AllocationExitBody(exit_code=code, reason=reason))
            except NotFound:
                pass  # the master has ended it already, or never gave it to this agent
            except DettuiError as exc:
                log.warning("agent %s: exit report of %s failed (%s); retrying", self.id,
                            alloc_id, exc)
                await asyncio.sleep(next(waits))
                continue
            self._marker(alloc_id).unlink(missing_ok=True)
            return

    async def _shutdown(self) -> None:
        """Agent stop: every allocation's process tree ends; exits reported as lost."""
        with contextlib.suppress(DettuiError):  # no new work while we wind down
            await self.client.agent_drain(self.id)
        runs = list(self.runs.values())
        await asyncio.gather(*(r.kill("lost") for r in runs), return_exceptions=True)
        if self._supervisors:
            await asyncio.wait(self._supervisors, timeout=15)
        if self.forks is not None:
            await self.forks.shutdown()
        with contextlib.suppress(DettuiError):
            await self.client.agent_leave(self.id)


def _drop_upto(lines: list[dict[str, Any]], upto: int) -> None:
    """Remove the acknowledged lines (sequence numbers up to `upto`) from the front."""
    while lines and int(lines[0]["seq"]) <= upto:
        lines.pop(0)


def _addresses(master_url: str) -> list[str]:
    """This machine's address as seen on the route to the master (what peers can reach)."""
    host = master_url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # no packet is sent: this only picks the outgoing interface
        return [s.getsockname()[0]]
    return ["127.0.0.1"]
