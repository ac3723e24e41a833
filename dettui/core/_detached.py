"""Detached mode: the Core API for a script run outside the cluster (WIRE §8).

    from dettui import core

    with core.init(detached=core.DetachedConfig(name="spirals", hparams={"lr": 0.03})) as ctx:
        ctx.train.report_training_metrics(steps_completed=10, metrics={"loss": 0.3})
        with ctx.checkpoint.store_path({"steps_completed": 10}) as (path, uuid):
            ...

The script creates an unmanaged experiment and trial on the master and reports to them like a
managed trial: `dettui e list`, `dettui e describe` and `dettui t logs` show it. `detached` is
a `DetachedConfig`, a dict with the same keys, or `True` for every default:

    master                  DET_MASTER, else http://127.0.0.1:8080
    user, password          DET_USER / DET_PASS, else the token `dettui user login` stored,
                            else user `determined` with an empty password
    name                    the experiment's name (default `unmanaged-<8 hex>`)
    description, labels, data   copied into the experiment config
    hparams                 the trial's hyperparameters (`ctx.info.trial.hparams`)
    searcher                default {name: single, metric: unmanaged}; `metric` names the
                            validation metric that ranks checkpoints for GC
    checkpoint_storage      a directory (default: the dettui user data dir's `checkpoints`) or
                            a `checkpoint_storage` mapping; `core.init(checkpoint_storage=...)`
                            wins over it
    external_experiment_id  reuse the experiment known by this id (created on first use)
    external_trial_id       with external_experiment_id: resume that trial; its run id goes up
                            and `ctx.info.latest_checkpoint` is its checkpoint with most steps
    ship_logs               copy stdout and stderr to the trial's logs (default True)

With a `DistributedContext` only the chief (rank 0) talks to the master to create the
experiment and trial; it broadcasts the ids to the other ranks. Preemption is a dummy. On exit
(the `with` block, or `close()`) the trial ends COMPLETED, or ERROR if an exception escaped
(`sys.exit(0)` and `InvalidHP` count as success). A script that is killed outright stops
heartbeating and the master marks its trial ERROR after five minutes.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import sys
import threading
import traceback
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from dettui.core._checkpoint import CheckpointContext
from dettui.core._context import Context, InvalidHP
from dettui.core._distributed import DistributedContext
from dettui.core._info import ClusterInfo, TrialInfo
from dettui.core._preempt import DummyPreemptContext
from dettui.core._searcher import DummySearcherContext, SearcherContext
from dettui.core._session import Session
from dettui.core._train import (
    DummyTrainContext,
    TensorboardMode,
    TrainContext,
    tensorboard_path,
)
from dettui.errors import DettuiError, Unauthenticated
from dettui.storage import storage_base

log = logging.getLogger("dettui.core")
HEARTBEAT_SECONDS = 60.0
HEARTBEAT_RETRY_SECONDS = 10.0
SETUP_RETRIES = 3


@dataclasses.dataclass(frozen=True)
class DetachedConfig:
    """How a detached script finds the master and describes its experiment and trial."""

    master: str | None = None
    user: str | None = None
    password: str | None = None
    name: str | None = None
    description: str | None = None
    labels: list[str] | None = None
    data: dict[str, Any] | None = None
    hparams: dict[str, Any] | None = None
    searcher: dict[str, Any] | None = None
    checkpoint_storage: str | Path | dict[str, Any] | None = None
    external_experiment_id: str | None = None
    external_trial_id: str | None = None
    ship_logs: bool = True

    @classmethod
    def of(cls, value: DetachedConfig | dict[str, Any] | bool) -> DetachedConfig:
        if isinstance(value, DetachedConfig):
            return value
        if value is True:
            return cls()
        if isinstance(value, dict):
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"detached: unknown key(s) {', '.join(unknown)} "
                                 f"(known: {', '.join(sorted(known))})")
            return cls(**value)
        raise TypeError("detached must be a core.DetachedConfig, a dict or True, "
                        f"not {type(value).__name__}")


def _storage_config(value: str | Path | dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    if value is None:
        import platformdirs

        value = Path(platformdirs.user_data_dir("dettui")) / "checkpoints"
    return {"type": "directory", "container_path": str(Path(value).expanduser().resolve())}


def _login(master: str, cfg: DetachedConfig) -> tuple[str, str]:
    """(username, user token): the stored CLI token if it still works, else log in."""
    from dettui.auth import load_token, store_token

    user = cfg.user or os.environ.get("DET_USER") or None
    stored = load_token(master)
    if stored and cfg.password is None and (user is None or stored[0] == user):
        try:
            Session(master, user_token=stored[1]).get("/api/v1/me", retries=SETUP_RETRIES)
            return stored
        except Unauthenticated:
            pass
    username = user or "determined"
    password = cfg.password if cfg.password is not None else os.environ.get("DET_PASS", "")
    body = Session(master).post("/api/v1/auth/login", {
        "username": username, "password": password, "isHashed": False}, retries=SETUP_RETRIES)
    token = str(body["token"])
    store_token(master, username, token)
    return username, token


def _experiment_config(cfg: DetachedConfig, storage: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {"name": cfg.name, "description": cfg.description,
                              "labels": cfg.labels, "data": cfg.data, "searcher": cfg.searcher,
                              "checkpoint_storage": storage}
    return {k: v for k, v in config.items() if v is not None}


def _register(cfg: DetachedConfig, storage: dict[str, Any]) -> dict[str, Any]:
    """The chief's part (WIRE §8 steps 0-6): log in, create or find the experiment and trial,
    start a run of the trial and mark it RUNNING."""
    from dettui.client import master_url

    master = master_url(cfg.master)
    username, token = _login(master, cfg)
    s = Session(master, user_token=token)
    # JSON is YAML: the master reads this as the experiment's config text.
    body = {"config": json.dumps(_experiment_config(cfg, storage), default=str),
            "unmanaged": True}
    if cfg.external_experiment_id:
        quoted = urllib.parse.quote(cfg.external_experiment_id, safe="")
        exp = s.request("PUT", f"/api/v1/experiments/by-external-id/{quoted}", body,
                        retries=SETUP_RETRIES)
    else:
        exp = s.post("/api/v1/experiments", body, retries=SETUP_RETRIES)
    exp_id = int(exp["experiment"]["id"])
    create = {"experimentId": exp_id, "hparams": cfg.hparams, "unmanaged": True}
    if cfg.external_trial_id:
        trial = s.request("PUT", "/api/v1/trials", {
            "createTrialRequest": create, "externalTrialId": cfg.external_trial_id},
            retries=SETUP_RETRIES)["trial"]
    else:
        trial = s.post("/api/v1/trials", create, retries=SETUP_RETRIES)["trial"]
    trial_id = int(trial["id"])
    cluster_id = str(s.get("/api/v1/master", retries=SETUP_RETRIES)["clusterId"])
    started = s.post(f"/api/v1/trials/{trial_id}/start", {"trialId": trial_id, "resume": True},
                     retries=SETUP_RETRIES)
    s.request("PATCH", f"/api/v1/trials/{trial_id}",
              {"trialId": trial_id, "state": "STATE_RUNNING"}, retries=SETUP_RETRIES)
    return {"master": master, "user": username, "token": token, "cluster_id": cluster_id,
            "experiment_id": exp_id, "trial_id": trial_id, "task_id": str(trial["taskId"]),
            "hparams": trial.get("hparams") or {}, "config": exp["config"],
            "run_id": int(started["trialRunId"]),
            "steps_completed": int(started.get("stepsCompleted") or 0),
            "latest_checkpoint": started.get("latestCheckpoint") or None}


def _shared_setup(cfg: DetachedConfig, storage: dict[str, Any],
                  dist: DistributedContext) -> dict[str, Any]:
    """The chief registers; every rank gets the result (or the chief's error)."""
    if not dist.is_chief:
        shared = dist.broadcast(None)
        if shared["error"]:
            raise RuntimeError(f"the chief could not start the detached trial: {shared['error']}")
        return dict(shared["setup"])
    try:
        setup = _register(cfg, storage)
    except BaseException as exc:
        dist.broadcast({"setup": None, "error": str(exc) or type(exc).__name__})
        raise
    dist.broadcast({"setup": setup, "error": None})
    return setup


def init_detached(detached: DetachedConfig | dict[str, Any] | bool, *,
                  distributed: DistributedContext | None = None,
                  checkpoint_storage: str | Path | None = None,
                  tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> DetachedContext:
    """`core.init(detached=...)` off-cluster: a Context reporting to an unmanaged trial."""
    cfg = DetachedConfig.of(detached)
    if cfg.external_trial_id and not cfg.external_experiment_id:
        raise ValueError("detached: external_trial_id needs external_experiment_id as well")
    dist = distributed or DistributedContext()
    storage = _storage_config(checkpoint_storage if checkpoint_storage is not None
                              else cfg.checkpoint_storage)
    setup = _shared_setup(cfg, storage, dist)
    info = ClusterInfo(
        master_url=setup["master"], cluster_id=setup["cluster_id"], agent_id="detached",
        slot_ids=[], task_id=setup["task_id"], allocation_id="", session_token=setup["token"],
        task_type="TRIAL", latest_checkpoint=setup["latest_checkpoint"], user=setup["user"],
        trial=TrialInfo(trial_id=setup["trial_id"], experiment_id=setup["experiment_id"],
                        trial_seed=0, hparams=setup["hparams"], config=setup["config"],
                        steps_completed=setup["steps_completed"],
                        trial_run_id=setup["run_id"]),
    )
    session = Session(info.master_url, user_token=setup["token"])
    base = storage_base({"checkpoint_storage": storage})
    tensorboard = tensorboard_path(base, info)
    train: Any = (TrainContext(session, info, True, tensorboard, tensorboard_mode)
                  if dist.is_chief
                  else DummyTrainContext(tensorboard, session, info))
    has_length = bool((info.trial.config.get("searcher") or {}).get("max_length"))
    searcher: Any = (SearcherContext(train, info, dist) if has_length
                     else DummySearcherContext())
    run = _Run(session, info, dist, ship_logs=cfg.ship_logs)
    if dist.is_chief:
        log.info("dettui.core: detached trial %d of experiment %d on %s (run %d)",
                 info.trial.trial_id, info.trial.experiment_id, info.master_url,
                 info.trial.trial_run_id)
    return DetachedContext(run=run, info=info, distributed=dist, train=train,
                           checkpoint=CheckpointContext(base, dist, session, info),
                           preempt=DummyPreemptContext(), searcher=searcher, session=session)


def _failed(exc: BaseException | None) -> bool:
    if exc is None or isinstance(exc, InvalidHP):
        return False
    if isinstance(exc, SystemExit):
        return exc.code not in (None, 0)
    return True


class DetachedContext(Context):
    """A Context whose close also ends the detached trial: COMPLETED, or ERROR on failure."""

    def __init__(self, *, run: _Run, **kw: Any) -> None:
        super().__init__(**kw)
        self._run = run
        self._failure = False
        self._closed = False
        atexit.register(self._at_exit)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if _failed(exc):
            self._failure = True
            self._run.log_exception(exc_type, exc, tb)
        super().__exit__(exc_type, exc, tb)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        try:
            super().close()
        except BaseException:
            self._failure = True
            raise
        finally:
            self._run.finish(failed=self._failure)

    def _at_exit(self) -> None:
        """A script that never closed its context: end the trial as the interpreter exits."""
        self._failure = self._failure or self._run.saw_uncaught
        self.close()


class _Run:
    """What a detached trial needs while it runs: heartbeats (chief), shipped output (every
    rank), and the final state (chief)."""

    def __init__(self, session: Session, info: ClusterInfo, dist: DistributedContext,
                 *, ship_logs: bool) -> None:
        self._session = session
        self._path = f"/api/v1/trials/{info.trial.trial_id}"
        self._trial_id = info.trial.trial_id
        self._is_chief = dist.is_chief
        self._stop = threading.Event()
        self.saw_uncaught = False
        self._prev_hook = sys.excepthook
        sys.excepthook = self._excepthook
        self._beat: threading.Thread | None = None
        if dist.is_chief:
            self._beat = threading.Thread(target=self._heartbeat, name="dettui-heartbeat",
                                          daemon=True)
            self._beat.start()
        self._logs = (_LogShipper(session, info.task_id, dist.rank if dist.size > 1 else None)
                      if ship_logs else None)

    def log_exception(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                      tb: TracebackType | None) -> None:
        """The traceback of an exception leaving the `with` block: Python prints it only after
        the trial has ended, so it goes to the trial's logs now."""
        if self._logs is not None and exc is not None:
            self._logs.stop_capture()  # what was printed before comes first
            for line in "".join(traceback.format_exception(exc_type, exc, tb)).splitlines():
                self._logs.add("stderr", line + "\n")

    def _excepthook(self, *args: Any) -> None:
        self.saw_uncaught = True
        self._prev_hook(*args)

    def _heartbeat(self) -> None:
        wait = HEARTBEAT_SECONDS
        while not self._stop.wait(wait):
            try:
                self._session.request("PATCH", self._path, {"trialId": self._trial_id},
                                      retries=0, timeout=30)
                wait = HEARTBEAT_SECONDS
            except DettuiError as exc:
                log.debug("detached heartbeat failed: %s", exc)
                wait = HEARTBEAT_RETRY_SECONDS

    def finish(self, *, failed: bool) -> None:
        self._stop.set()
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_hook
        if self._logs is not None:
            self._logs.close()
        if not self._is_chief:
            return
        state = "STATE_ERROR" if failed else "STATE_COMPLETED"
        try:
            self._session.request("PATCH", self._path,
                                  {"trialId": self._trial_id, "state": state},
                                  retries=SETUP_RETRIES)
        except DettuiError as exc:
            log.warning("could not report the end of detached trial %d (%s): %s",
                        self._trial_id, state, exc)


class _LogShipper:
    """Copies this process's stdout and stderr to the trial's logs. It works on file
    descriptors 1 and 2, so logging handlers made earlier and child processes are included;
    everything still reaches the terminal as before."""

    BATCH = 1000
    MAX_PENDING = 100_000

    def __init__(self, session: Session, task_id: str, rank: int | None) -> None:
        self._session = session
        self._task_id = task_id
        self._rank = rank
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tees: list[_Tee] = []
        for fd, stdtype in ((1, "stdout"), (2, "stderr")):
            try:
                self._tees.append(_Tee(fd, stdtype, self.add))
            except OSError as exc:  # no such descriptor (a daemon with stdout closed)
                log.debug("not shipping %s: %s", stdtype, exc)
        self._sender = threading.Thread(target=self._send_loop, name="dettui-logs", daemon=True)
        self._sender.start()

    def add(self, stdtype: str, text: str) -> None:
        line = {"timestamp": datetime.now(UTC).isoformat(), "task_id": self._task_id,
                "allocation_id": None, "agent_id": None, "container_id": None,
                "rank_id": self._rank, "stdtype": stdtype, "source": "task", "log": text}
        with self._lock:
            if len(self._pending) < self.MAX_PENDING:
                self._pending.append(line)

    def _ship(self) -> bool:
        with self._lock:
            batch, self._pending = self._pending[:self.BATCH], self._pending[self.BATCH:]
        if not batch:
            return False
        with contextlib.suppress(DettuiError):  # best effort: the terminal still has it
            self._session.post("/api/v1/task/logs", {"logs": batch}, retries=2, timeout=20)
        return True

    def _send_loop(self) -> None:
        while not self._stop.wait(1.0):
            while self._ship():
                pass

    def stop_capture(self) -> None:
        tees, self._tees = self._tees, []
        for tee in tees:
            tee.stop()

    def close(self) -> None:
        self.stop_capture()
        self._stop.set()
        self._sender.join(timeout=30)
        while self._ship():
            pass


class _Tee:
    """Point file descriptor `fd` at a pipe; a thread copies what arrives to the original
    target and hands complete lines to `sink`."""

    def __init__(self, fd: int, stdtype: str, sink: Any) -> None:
        self._fd = fd
        self._stdtype = stdtype
        self._sink = sink
        _flush_python_stream(fd)
        self._saved = os.dup(fd)
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        self._read = read
        self._thread = threading.Thread(target=self._pump, name=f"dettui-{stdtype}",
                                        daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        rest = b""
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except OSError:
                break
            if not chunk:
                break
            _write_all(self._saved, chunk)
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                self._sink(self._stdtype, line.rstrip(b"\r").decode(errors="replace") + "\n")
        if rest:
            self._sink(self._stdtype, rest.decode(errors="replace") + "\n")

    def stop(self) -> None:
        _flush_python_stream(self._fd)
        os.dup2(self._saved, self._fd)  # closes the pipe's last write end (ours)
        self._thread.join(timeout=5)
        os.close(self._read)
        os.close(self._saved)


def _flush_python_stream(fd: int) -> None:
    stream = sys.stdout if fd == 1 else sys.stderr
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return
        view = view[written:]
