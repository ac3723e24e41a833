"""One allocation on this agent: fetch and extract the context, run the entrypoint, ship its
output, and report how it ended."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import json
import logging
import os
import shlex
import shutil
import stat
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from dettui import context, dirfd, lifeline, paths, retry
from dettui.agent import (
    forkpool,
    logship,
    process,
    runinfo,
    sandbox,
    spool,
    tensorboard_dirs,
    trial_exec,
    trialuser,
)
from dettui.agent.trialuser import TrialUser
from dettui.client import Client
from dettui.errors import ContextError, DettuiError, MasterUnreachable
from dettui.launch import sitedir, spec
from dettui.launch.torch_distributed import free_port
from dettui.protocol import StartWork
from dettui.storage import storage_base, storage_paths

log = logging.getLogger("dettui.agent")
SHIP_INTERVAL = 0.25
SHIP_BATCH = 1000
SHIP_GRACE = 30.0  # seconds to keep trying to ship the last lines before the exit report
KILL_GRACE = 5.0
OUTPUT_GRACE = 2.0  # seconds to read the last output after the entrypoint exits
START_LINE_COMMAND = 200  # characters of the entrypoint the start's log line shows
STARTED_WORDS = "dettui: trial started "  # the trial log's line saying how it started
CONTEXTS_KEPT = 8  # experiments whose context the agent keeps in memory
CONTEXT_KEPT_BYTES = 1 << 20  # a bigger context is fetched for each of its trials
MASTER_PATIENCE = 600.0  # seconds to wait for an unreachable master before giving up a start


class AllocationRun:
    def __init__(self, spec: StartWork, client: Client, agent_id: str, work_root: Path,
                 master_url: str, own_pids: set[int], hidden: Sequence[Path] = (),
                 exposed: Sequence[Path] = (), user: TrialUser | None = None,
                 nproc: int | None = None, forks: forkpool.Pool | None = None,
                 contexts: collections.OrderedDict[int, bytes] | None = None) -> None:
        self.spec = spec
        # the agent's recent contexts by experiment (kept across its allocations)
        self.contexts: collections.OrderedDict[int, bytes] = (
            collections.OrderedDict() if contexts is None else contexts)
        self.forks = forks  # the agent's fork servers (None: every trial starts fresh)
        self.way = ""  # how the trial started, for its start line
        self.user = user  # who the trial runs as (None: this process's user)
        self.nproc = nproc
        self.hidden = [*hidden, work_root]  # what the trial must not read
        self.exposed = list(exposed)  # inside `hidden`, but a trial may use it (checkpoints)
        self.id = spec.allocation_id
        self.client = client
        self.agent_id = agent_id
        self.workdir = paths.confined(work_root, self.id, where="allocationId")
        self.run_dir = paths.confined(work_root, f"{self.id}.run", where="allocationId")
        self.master_url = master_url
        self.own_pids = own_pids
        self.proc: asyncio.subprocess.Process | forkpool.Forked | None = None
        self.known: dict[int, psutil.Process] = {}
        # In the sandbox's PID namespace (its root the namespace's outer process): every
        # process of the trial is in the root's tree while it lives, and none outlives it.
        self.contained = False
        self.killed = False
        self.kill_reason = ""
        self.exit_code: int | None = None
        self.reason = ""
        self.spool = spool.Spool(work_root / spool.DIRECTORY, self.id)

    # --- running --------------------------------------------------------------------------

    async def run(self) -> tuple[int | None, str]:
        """Run to completion; return (exit code, reason) for the exit report."""
        shipper = asyncio.create_task(self._ship_loop())
        try:
            await self._prepare()
            if not self.killed:
                await self._execute()
        except DettuiError as exc:
            self._system_line(f"failed to start: {exc}")
            self.exit_code, self.reason = None, "spawn_failed"
        except OSError as exc:
            self._system_line(f"failed to start the entrypoint: {exc}")
            self.exit_code, self.reason = None, "spawn_failed"
        finally:
            await self._end_tree()
            shipper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await shipper
            # lines the spool could only keep in memory (a full disk) exist nowhere else
            shipped = await self._ship(
                give_up_after=None if self.spool.memory_only else SHIP_GRACE)
            self.spool.close(shipped)  # the agent ships what is left later
            # the work and run dirs go after the exit report (`cleanup`): the next trial
            # starts without waiting for a tree's removal
        if self.killed:
            return self.exit_code, self.kill_reason or "killed"
        return self.exit_code, self.reason

    async def _prepare(self) -> None:
        if self.user is not None:  # a root agent: the owner's linked user, else its default
            self.user = trialuser.linked(self.spec.agent_user, self.user)
            if self.user.root:
                self._system_line("note: this trial runs as root, as its owner's link or the "
                                  "agent's --trial-user says (without capabilities)")
        elif self.spec.agent_user is not None and os.geteuid() != 0:
            self._system_line("note: the owner's linked agent user is not used: this agent is "
                              "not root, so trials run as the agent's own user")
        self.workdir.mkdir(parents=True, exist_ok=True)
        data = await self._fetch_context()
        if data:
            try:
                await asyncio.to_thread(context.extract, data, self.workdir)
            except DettuiError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure here is the user's to see
                raise ContextError(f"could not extract the model context: "
                                   f"{type(exc).__name__}: {exc}") from exc

    async def _fetch_context(self) -> bytes:
        """The model context, waiting out a master that is away (restarting) for up to
        MASTER_PATIENCE: a master restart must not fail the trial. An experiment's context
        never changes: the agent keeps the last few small ones (`contexts`), so the trials
        of a search after the first cost the master no read and the agent no request."""
        kept = self.contexts.get(self.spec.experiment_id)
        if kept is not None:
            self.contexts.move_to_end(self.spec.experiment_id)
            return kept
        waits = retry.delays(give_up_after=MASTER_PATIENCE)
        while True:
            try:
                data = await self.client.context_directory(self.spec.task_id)
                if len(data) <= CONTEXT_KEPT_BYTES:
                    self.contexts[self.spec.experiment_id] = data
                    while len(self.contexts) > CONTEXTS_KEPT:
                        self.contexts.popitem(last=False)
                return data
            except MasterUnreachable:
                wait = next(waits, None)
                if wait is None or self.killed:
                    raise
                await asyncio.sleep(wait)

    def _argv(self) -> list[str]:
        # a legacy `module:Trial` runs on the experiment's PATH's `python3` when it sets one
        # (as Determined's exec/launch.py), else on this agent's Python
        python = "python3" if "PATH" in self.spec.env else sys.executable
        try:
            argv = spec.entrypoint_argv(self.spec.entrypoint or "", python)
        except spec.LaunchArgsError as exc:
            raise DettuiError(str(exc)) from exc
        if (self.workdir / spec.STARTUP_HOOK).is_file():
            return spec.with_startup_hook(argv, hook_shell())
        return argv

    def _env(self, mounted: bool) -> dict[str, str]:
        """The trial's environment: the allow-listed part of the agent's (never its secrets),
        then the master's DET_* variables and the experiment's own. Only the trial's exec gets
        it (trial_exec.py): what runs before, as root, gets `_stage_env`."""
        env = {k: v for k, v in os.environ.items() if allowed(k)}
        env.update(self.spec.env)
        env.update(runinfo.environment(self.run_dir, self.workdir, mounted))
        for name, port in runinfo.ports(env, free_port).items():
            env.setdefault(name, port)
        # a temporary directory of the trial's own (tempfile, torch's caches): in the host's
        # shared /tmp another user's trial could have made the directories it will use
        env["TMPDIR"] = os.path.join(env["DET_RUN_DIR"], "tmp")
        if self.user is not None and self.user.uid != os.geteuid():
            env.update(self._identity(env["DET_WORKDIR"]))
        env.update({
            "DET_MASTER": self.master_url,
            "DET_MASTER_ADDR": self.master_url.split("://", 1)[-1].rsplit(":", 1)[0],
            "DET_MASTER_HOST": self.master_url.split("://", 1)[-1].rsplit(":", 1)[0],
            "DET_MASTER_PORT": self.master_url.rsplit(":", 1)[-1],
            "DET_AGENT_ID": self.agent_id,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (sitedir.DIRECTORY, env.get("PYTHONPATH"))
                                          if p),
            process.MARK: self.id,
            process.AGENT_MARK: self.agent_id,
            process.INSTANCE_MARK: process.instance(),
            "PATH": self._path(env.get("PATH", "")),
        })
        # a launcher in the trial forks its workers as the agent forks trials (forked_workers)
        env["DETTUI_WORKER_START"] = ("fork" if self.forks is not None and self.spec.fork_server
                                      else "fresh")
        cuda = self.spec.cuda_devices
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in cuda)
        return env

    def _path(self, inherited: str) -> str:
        """The trial's PATH: the experiment's (environment_variables) as given, else this
        agent's Python first; a Python the entrypoint names by absolute path before either, so
        the trial's every `python3` (a launcher's workers) is the Python its user chose."""
        default = os.path.dirname(sys.executable) + os.pathsep + inherited
        return spec.trial_path(self.spec.env.get("PATH"), self._named_python(), default)

    def _named_python(self) -> str | None:
        return spec.named_python(self.spec.entrypoint or "")

    def _stage_env(self) -> dict[str, str]:
        """The environment of what runs before the trial (the sandbox's setup, setpriv): the
        system's PATH and the marks by which the allocation's processes are found."""
        marks = {process.MARK: self.id, process.AGENT_MARK: self.agent_id,
                 process.INSTANCE_MARK: process.instance()}
        if process.TEST_MARK in os.environ:
            marks[process.TEST_MARK] = os.environ[process.TEST_MARK]
        return sandbox.stage_environment(marks)

    def _identity(self, workdir: str) -> dict[str, str]:
        """USER, LOGNAME and HOME of the trial's user: its home when it owns one, else the work
        dir (`nobody`'s /nonexistent would fail every cache write)."""
        assert self.user is not None
        home = self.user.home
        try:
            owned = bool(home) and Path(home).is_dir() and Path(home).stat().st_uid == self.user.uid
        except OSError:
            owned = False
        return {"USER": self.user.name, "LOGNAME": self.user.name,
                "HOME": home if owned else workdir}

    def _hand_over(self) -> None:
        """Give the trial's user its work and run dirs, 0700: no other user reads them. (The
        default checkpoint storage is made open to every trial user by the master.)"""
        user = self.user
        if user is None or user.uid == os.geteuid() or os.geteuid() != 0:
            return
        for top in (self.workdir, self.run_dir):
            if top.exists():
                chown_tree(top, user.uid, user.gid)
                top.chmod(0o700)

    async def _execute(self) -> None:
        argv = self._argv()
        support = sandbox.probe()
        self.contained = support.on
        env = self._env(support.on)
        self._check_storage(env)
        if not _runnable(argv[0], self.workdir, env["PATH"]):  # the start's error, as exec's
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
        mounts = self._mounts(env)
        why = await asyncio.to_thread(self._write_run_dir, env, support.on)
        if why is not None:
            self._system_line(f"warning: this trial's TensorBoard events cannot be written: {why}")
        if not support.on:
            self._system_line(f"note: {support.note}")
        self.proc = await self._fork(argv, env, support, mounts)
        if self.proc is None:
            self.proc = await self._fresh(argv, env, support, mounts)
        log.info("%s", self._started())
        self._system_line(f"{STARTED_WORDS}{self.way}", "INFO")  # `dettui t describe` reads it
        assert self.proc.stdout is not None and self.proc.stderr is not None
        watcher = asyncio.create_task(self._track_tree())
        pumps = asyncio.gather(self._pump(self.proc.stdout, "stdout"),
                               self._pump(self.proc.stderr, "stderr"))
        # The exit is waited for, not polled: a forked trial's comes from its server, a
        # fresh one's through a pidfd (readable when it ends; asyncio's watcher thread sets
        # the return code a moment later). The pipes may stay open in a leftover process.
        exited = asyncio.ensure_future(self.proc.wait() if isinstance(
            self.proc, forkpool.Forked) else _ended(self.proc))
        try:
            while self.proc.returncode is None:
                if not exited.done():
                    await asyncio.wait([exited, pumps], return_when=asyncio.FIRST_COMPLETED)
                if pumps.done() or exited.done():
                    await asyncio.wait([exited], timeout=0.1)
            code = self.proc.returncode
            try:
                await asyncio.wait_for(asyncio.shield(pumps), OUTPUT_GRACE)
            except TimeoutError:
                await self._end_tree()  # leftovers hold the pipes: they go with the allocation
                await asyncio.wait_for(pumps, 10.0)
        finally:
            watcher.cancel()
            exited.cancel()
            self.own_pids.discard(self.proc.pid)
        self.exit_code = code if code >= 0 else 128 - code
        self.reason = "" if code == 0 else ("error" if code > 0 else f"signal {-code}")
        if code and not self.killed:  # the line a user looks for when a trial dies at once
            self._system_line(f"the entrypoint exited with code {code}" if code > 0
                              else f"the entrypoint was ended by signal {-code}")

    def _write_run_dir(self, env: dict[str, str], mounted: bool) -> str | None:
        """The run dir's files (one thread hop for them all): the info files, the TensorBoard
        dir (why it cannot be written, or None), TMPDIR, and the trial's environment, which
        waits there for its exec after setpriv (nothing before it, as root, runs with a
        user's PATH or LD_PRELOAD); then the dirs handed to the trial's user."""
        runinfo.write(self.run_dir, env, self.workdir, mounted)
        why = self._tensorboard_dir(env)
        (self.run_dir / "tmp").mkdir(exist_ok=True)
        try:
            trial_exec.write(self.run_dir / trial_exec.FILE_NAME, env)
        except ValueError as exc:
            raise DettuiError(f"environment.environment_variables: {exc}") from exc
        self._hand_over()
        return why

    async def _fresh(self, argv: list[str], env: dict[str, str], support: sandbox.Support,
                     mounts: list[runinfo.Mount]) -> asyncio.subprocess.Process:
        """A new interpreter (or whatever the entrypoint runs) in the sandbox's script."""
        entry = trial_exec.command(sys.executable,
                                   os.path.join(env["DET_RUN_DIR"], trial_exec.FILE_NAME), argv)
        launch = sandbox.wrap(support, entry, env["DET_WORKDIR"], self.hidden, self._kept(env),
                              mounts, self.user, self.nproc, self._reach(env, argv[0]),
                              label=f"trial {self.spec.trial_id}")
        stage_env = {**self._stage_env(), **launch.env}
        # The parent-death signal through setpriv rather than a preexec_fn keeps the spawn a
        # vfork (see lifeline.pdeathsig_prefix); by its absolute path, never from the work dir.
        prefix = lifeline.pdeathsig_prefix()
        if prefix and not os.path.isabs(prefix[0]):
            prefix = ()
        proc = await asyncio.create_subprocess_exec(
            *prefix, *launch.argv, cwd=self.workdir, env=stage_env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, preexec_fn=None if prefix else lifeline.die_with_parent,
        )
        self.own_pids.add(proc.pid)
        log.debug("allocation %s: pid %d runs %s (sandbox arguments: %s)", self.id,
                  proc.pid, launch.argv, stage_env.get(sandbox.ARGS_VAR, "none"))
        return proc

    async def _fork(self, argv: list[str], env: dict[str, str], support: sandbox.Support,
                    mounts: list[runinfo.Mount]) -> forkpool.Forked | None:
        """The trial forked by the fork server of its user, in the same sandbox (None: it
        starts fresh, and `way` says why)."""
        if self.forks is None or not self.spec.fork_server:
            self.way = ("fresh: the fork server is off for this agent" if self.forks is None
                        else f"fresh: {self.spec.fork_off or 'the fork server is off here'}")
            return None
        if (self.workdir / spec.STARTUP_HOOK).is_file():
            self.way = f"fresh: {spec.STARTUP_HOOK} runs first"
            return None
        run, why = forkpool.python_run(argv, self.workdir, env["PATH"], sys.executable)
        server = None
        uid = self.user.uid if self.user is not None else None
        if run is not None:
            server = await self.forks.server(uid, self.spec.owner_id)
            if server is None:
                why = self.forks.failure or "the fork server could not start"
                run = None
        home = env.get("HOME")
        reason = await asyncio.to_thread(forkpool.why_fresh, run, why, env, self.workdir,
                                         server.info if server else {}, home,
                                         self.forks.agent_env, self.user)
        if reason is not None or server is None or run is None:
            self.way = f"fresh: {reason or why}"
            return None
        plan = sandbox.plan(support, env["DET_WORKDIR"], self.hidden, self._kept(env), mounts,
                            self.user, self.nproc, self._reach(env, argv[0]))
        request = {"kind": run.kind, "target": run.target, "args": list(run.args),
                   "env_file": os.path.join(env["DET_RUN_DIR"], trial_exec.FILE_NAME),
                   "plan": plan.to_json(), "label": f"trial {self.spec.trial_id}",
                   "marks": self._stage_env(),  # what /proc shows, as for the script
                   "title": run.title, "python": run.title.split(" ", 1)[0],
                   "executable": run.executable, "shell": argv[:2] == ["sh", "-c"]}
        started = time.monotonic()
        try:
            forked = await self.forks.spawn(server, request)
        except OSError as exc:
            # changed on disk just now: the next server is a fresh import of what changed
            again = (await self.forks.server(uid, self.spec.owner_id) if server.stale
                     else None)
            if again is None:
                self.way = f"fresh: the fork server failed ({exc})"
                return None
            server = again
            try:
                forked = await self.forks.spawn(server, request)
            except OSError as exc2:
                self.way = f"fresh: the fork server failed ({exc2})"
                return None
        self.way = (f"forked by fork server {server.proc.pid} in "
                    f"{(time.monotonic() - started) * 1000:.0f} ms")
        return forked

    def _started(self) -> str:
        """The one line a trial's start logs: `trial 3 allocation 1.a1b2 started: python3
        train.py (2 slots, user alice)`, the entrypoint as its config gives it."""
        entry = self.spec.entrypoint or ""
        command = one_line(entry if isinstance(entry, str) else shlex.join(entry))
        if len(command) > START_LINE_COMMAND:
            command = command[:START_LINE_COMMAND - 1] + "…"
        slots = len(self.spec.slots)
        user = self.user.name if self.user is not None else _own_user_name()
        return (f"trial {self.spec.trial_id} allocation {self.id} started: {command} "
                f"({slots} slot{'' if slots == 1 else 's'}, user {user}; {self.way})")

    def _tensorboard_dir(self, env: dict[str, str]) -> str | None:
        """The trial's TensorBoard directory in the master's storage, made by this agent (root)
        for the trial's user, under levels no user owns (`tensorboard_dirs`); why not, if not."""
        user = self.user
        if user is None or user.uid == os.geteuid() or os.geteuid() != 0:
            return None  # one user for every trial here: the trial makes it
        for root in self._storage(env):
            # only the master's root itself: a `storage_path` under it is a name a user chose
            # (a link of theirs in the sticky root may point anywhere between check and use)
            if root in self._roots() and root.is_dir():
                return tensorboard_dirs.prepare(
                    root, env.get("DET_CLUSTER_ID", ""), env.get("DET_EXPERIMENT_ID", ""),
                    env.get("DET_TRIAL_ID", ""), user.uid, user.gid)
        return None

    def _kept(self, env: dict[str, str]) -> list[Path | trialuser.Pinned]:
        """What the trial needs of the hidden paths: its work dir and the master's checkpoint
        storage. (Storage a user named is never inside a hidden path, `_check_storage`; under
        a directory covered for `_reach` its user could not reach it anyway.) The storage is
        made here and pinned (`trialuser.pin`): `<root>/sub` in the master's sticky root may be
        a user's directory, renamed and swapped for a link after this check; the sandbox binds
        what was checked or refuses the trial."""
        kept: list[Path | trialuser.Pinned] = [self.workdir]
        for path in self._storage(env):
            if not self._trusted(path):
                continue
            with contextlib.suppress(OSError, ValueError):
                self._make_storage(path)
            pinned = trialuser.pin(path)
            if pinned is not None and self._trusted(pinned.path, resolve=False):
                kept.append(pinned)
        return kept

    def _make_storage(self, path: Path) -> None:
        """The storage directory, made (as root) where missing: the master's root as
        configured, and what lies under it (`storage_path`, a user's name, in a root every
        trial user may write) one level at a time without following links, so a link planted
        there makes nothing outside (ValueError when `path` does not name a place under a
        root as written)."""
        for root in self._roots():
            if path == root or path.is_relative_to(root):
                root.mkdir(parents=True, exist_ok=True)
                dirfd.make_under(root, path.relative_to(root).parts)
                return
        raise ValueError(f"{path} is not under the master's storage as written")

    def _roots(self) -> list[Path]:
        """The storage roots the master or this agent chose (never a name a user gave)."""
        return [*self.exposed, *([Path(self.spec.checkpoint_root)]
                                 if self.spec.checkpoint_root else [])]

    def _storage(self, env: dict[str, str]) -> list[Path]:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return [storage_base(json.loads(env["DET_EXPERIMENT_CONFIG"]))]
        return []

    def _trusted(self, path: Path, resolve: bool = True) -> bool:
        """Whether `path` is storage the master or this agent chose (the master's checkpoint
        root), not one a user named: only those may be made by the agent, and reached by the
        trial through directories its user could not pass. `resolve=False`: `path` is a
        pinned one's real path, taken as it is."""
        roots = self._roots()
        path = path.resolve() if resolve else path
        return any(path.is_relative_to(r.resolve()) for r in roots)

    def _reach(self, env: dict[str, str], program: str) -> list[Path]:
        """What the trial's user must reach even under directories closed to it: its work dir,
        the master's own checkpoint storage, a venv of this agent's that the entrypoint names
        by absolute path (its program, or the Python of its shell line); each resolved once,
        here, as the sandbox binds them as given (`venv_of`).
        Never a path a user chose (`checkpoint_storage: {host_path: /root/x}` would read what
        /root closes): that one the trial reaches by its user's permissions or not at all, and
        its log says so at start."""
        storage = self._storage(env)
        for path in storage:
            if not self._trusted(path) and self.user is not None and os.geteuid() == 0:
                where = trialuser.unreachable(path, self.user)
                if where is not None:
                    self._system_line(f"warning: checkpoint_storage {path}: user "
                                      f"{self.user.describe()} cannot pass {where}, so this "
                                      "trial cannot write checkpoints there")
        venvs = {v for p in (program, self._named_python() or "") for v in venv_of(p)}
        trusted = [r for r in (p.resolve() for p in storage) if self._trusted(r)]
        return [self.workdir.resolve(), *trusted, *sorted(venvs)]

    def _check_storage(self, env: dict[str, str]) -> None:
        """The checkpoint storage a trial is given must not reach what it must not read (this
        agent's secrets, other allocations, a state dir): refused before anything starts."""
        try:
            config = json.loads(env["DET_EXPERIMENT_CONFIG"])
        except (KeyError, ValueError):
            return
        for path in storage_paths(config):
            why = paths.exposure(path, self.hidden, self.exposed)
            if why is not None:
                raise DettuiError(f"checkpoint_storage: {why}; use another directory")

    def _mounts(self, env: dict[str, str]) -> list[runinfo.Mount]:
        try:
            config = json.loads(env["DET_EXPERIMENT_CONFIG"])
        except (KeyError, ValueError):
            config = {}
        out = runinfo.mounts(self.run_dir, self.workdir, config)
        for m in out:  # a mount needs its source; storage may not exist before a checkpoint
            if m.source in (self.run_dir, self.workdir) or self._trusted(m.source):
                with contextlib.suppress(OSError):
                    made = not m.source.exists()
                    m.source.mkdir(parents=True, exist_ok=True)
                    if made and m.target == runinfo.SHARED_FS and os.geteuid() == 0:
                        m.source.chmod(0o1777)  # the master's root, on another machine
            # a path a user named is never made by the agent (root): `host_path: /etc/nologin`
            # would make a directory there; it must exist, else its mount is left out
        return [p for p in (self._mountable(m) for m in out) if p is not None]

    def _mountable(self, mount: runinfo.Mount) -> runinfo.Mount | None:
        """The mount the trial may have, if any: the agent's own dirs as they are; storage
        pinned (`trialuser.pin`: its real path and identity, which the sandbox requires of what
        it binds), and a path a user named only when its user can reach that real path (a bind
        made by root passes the directories above it, as /root). A user's link resolved again
        at the bind could name, by then, a directory closed to the trial."""
        if mount.source in (self.run_dir, self.workdir):
            return mount
        pinned = trialuser.pin(mount.source)
        if pinned is None:
            return None  # no directory: never placed
        checked = runinfo.Mount(pinned.path, mount.target, pinned.identity)
        if self._trusted(pinned.path, resolve=False):
            return checked
        user = self.user
        if user is not None and trialuser.unreachable(pinned.path, user) is not None:
            return None
        return checked if trialuser.pin(mount.source) == pinned else None

    async def _pump(self, stream: asyncio.StreamReader, stdtype: str) -> None:
        rest = b""
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                break
            pieces, rest = logship.split_chunks(rest + chunk)
            for piece in pieces:
                self.spool.append(logship.parse(piece, stdtype))
        if rest:
            self.spool.append(logship.parse(rest, stdtype))

    async def _track_tree(self) -> None:
        """Remember descendants while the root lives, so re-parented ones are found later.
        The first look is after 0.5 s: a root just exec'd has no descendants yet, and the scan
        of every process costs a few ms of the agent's CPU per trial (`_end_tree` scans too).
        In the sandbox's PID namespace nothing can leave the root's tree (its init adopts
        what is orphaned, and every process in it ends with it): no scan is needed at all,
        which matters for a forked trial too, whose /proc environ is its server's."""
        if self.contained:
            return
        while self.proc is not None and self.proc.returncode is None:
            await asyncio.sleep(0.5)
            if self.proc.returncode is not None:
                break
            found = await asyncio.to_thread(process.members, self.proc.pid, self.id, (),
                                          self.agent_id)
            self.known.update((p.pid, p) for p in found if p.pid not in self.known)

    def processes(self) -> list[psutil.Process]:
        """The allocation's processes as last found (its root while it runs, and those
        `_track_tree` found): for sampling, without a scan of /proc."""
        if self.contained:
            root = self.proc.pid if self.proc is not None and self.proc.returncode is None \
                else None
            return process.tree(root)
        procs = list(self.known.values())
        if self.proc is not None and self.proc.returncode is None \
                and self.proc.pid not in self.known:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(self.proc.pid))
        return procs

    # --- ending ---------------------------------------------------------------------------

    async def kill(self, reason: str) -> None:
        """End the whole process tree now (the exit is reported by `run`)."""
        if self.killed:
            return
        self.killed = True
        self.kill_reason = reason
        self._system_line(f"killing allocation: {reason}")
        await self._end_tree()

    async def _end_tree(self) -> None:
        root = self.proc.pid if self.proc is not None and self.proc.returncode is None else None
        if self.contained:  # the namespace: the root's tree while it lives, nothing after
            procs = await asyncio.to_thread(process.tree, root) if root is not None else []
        else:
            procs = await asyncio.to_thread(process.members, root, self.id,
                                            list(self.known.values()), self.agent_id)
        if procs:
            survivors = await asyncio.to_thread(process.terminate, procs, self.own_pids,
                                                KILL_GRACE)
            for p in survivors:
                log.error("allocation %s: process %d survived SIGKILL", self.id, p.pid)

    def _system_line(self, text: str, level: str = "ERROR") -> None:
        """A line of the agent's in the trial's log: on stderr, but for a note (INFO) on
        stdout, which the master never takes for the last words of a trial that failed."""
        stream = "stdout" if level == "INFO" else "stderr"
        self.spool.append(logship.Line(time.time(), stream, text + "\n", None, level))

    async def _ship_loop(self) -> None:
        while True:
            await asyncio.sleep(SHIP_INTERVAL)
            await self._ship()

    async def _ship(self, give_up_after: float | None = None) -> bool:
        """Ship the spool's lines until none is left (True) or `give_up_after` seconds of
        failures have passed (False). A batch leaves the spool only once acknowledged."""
        self.spool.sync()
        return await ship(self.client, self.agent_id, self.spool.batch, self.spool.ack,
                          give_up_after)

    def cleanup(self) -> None:
        """Remove the work and run dirs (in a thread, once the exit is reported)."""
        if os.environ.get("DETTUI_KEEP_WORKDIRS"):
            return
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)


async def _ended(proc: asyncio.subprocess.Process) -> None:
    """Until `proc` has ended and asyncio has its return code: a pidfd wakes the loop when
    it ends, then the watcher thread's callback follows within moments."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):
        fd = None
    if fd is not None:
        ended = loop.create_future()
        loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
        try:
            await ended
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    while proc.returncode is None:
        await asyncio.sleep(0.001 if fd is not None else 0.05)


async def ship(client: Client, agent_id: str, batch: Callable[[int], list[dict[str, Any]]],
               ack: Callable[[int], None], give_up_after: float | None = None) -> bool:
    """POST batches of log lines until `batch` has none left (True), retrying with backoff
    while the master is away, for at most `give_up_after` seconds (False)."""
    waits = retry.delays(give_up_after=give_up_after)
    while lines := batch(SHIP_BATCH):
        try:
            await client.agent_logs(agent_id, lines)
        except DettuiError as exc:
            if exc.http_status not in (400, 404, 413):
                wait = next(waits, None)
                if wait is None:
                    return False
                await asyncio.sleep(wait)
                continue
            log.warning("dropping %d log lines of %s: %s", len(lines),
                        lines[0].get("allocationId"), exc)
        ack(int(lines[-1]["seq"]))
        waits = retry.delays(give_up_after=give_up_after)
    return True


# What a trial may inherit of the agent's environment; everything else (tokens, passwords,
# the agent's own settings) stays with the agent.
ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ",
           "TMPDIR", "HOSTNAME", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX",
           "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
           "http_proxy", "https_proxy", "no_proxy", process.TEST_MARK}
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NCCL_", "GLOO_", "NVIDIA_", "OMP_", "MKL_", "TORCH_")


def allowed(name: str) -> bool:
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES)


def _runnable(program: str, cwd: Path, path: str) -> bool:
    """Whether exec will find `program` (a relative path, or PATH entry, is relative to the
    work dir, as for the trial's exec)."""
    if os.sep in program:
        return os.access(cwd / program, os.X_OK)
    dirs = os.pathsep.join(str(cwd / d) for d in path.split(os.pathsep))
    return shutil.which(program, path=dirs) is not None


def venv_of(program: str) -> list[Path]:
    """The virtual environment of this agent's user that an entrypoint names by absolute path
    (`/opt/det/bin/python train.py`), which its trial user must be able to run even where it
    lies under a directory closed to that user: a venv (it has pyvenv.cfg) the agent's own
    user made holds code the admin installed, not another user's files.

    The venv is given by its resolved path (links followed once, here), never the path the
    entrypoint wrote, and only where no user can change what that path names (it and every
    directory above it are root's or this agent's, writable by neither group nor others): a
    user's link (`/tmp/x/v`) swapped between a venv and `/tmp/sec/inner` after this check
    would otherwise have the sandbox bind back whatever the link named later."""
    if not os.path.isabs(program):
        return []
    try:
        root = Path(program).parent.parent.resolve(strict=True)
        cfg = os.lstat(root / "pyvenv.cfg")
    except (OSError, RuntimeError):
        return []
    if not stat.S_ISREG(cfg.st_mode) or cfg.st_uid != os.geteuid():
        return []
    return [root] if trialuser.unswappable(root) else []


def chown_tree(top: Path, uid: int, gid: int) -> None:
    """`top` and everything under it owned by uid:gid (links themselves, never followed)."""
    os.chown(top, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def one_line(text: str) -> str:
    """`text` on one line: its control characters (a newline in an entrypoint) as `\\n`."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _own_user_name() -> str:
    """This agent's Unix user, by name (its uid where it has none)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def hook_shell() -> str:
    """The shell that sources startup-hook.sh: bash, as in Determined, else sh."""
    return shutil.which("bash") or "sh"
