"""The Core API context (`core.init()` makes it: `_init`), and its Dummy twin outside a cluster."""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Any

from dettui.core._checkpoint import CheckpointContext
from dettui.core._distributed import DistributedContext
from dettui.core._info import ClusterInfo
from dettui.core._preempt import DummyPreemptContext
from dettui.core._searcher import DummySearcherContext
from dettui.core._session import Session
from dettui.core._train import DummyTrainContext

log = logging.getLogger("dettui.core")


class InvalidHP(Exception):  # noqa: N818 - Determined's name
    """Raise inside `with core.init()` to end the trial early for bad hyperparameters."""


class ProfilerContext:
    """Determined's `ctx.profiler`: accepted; dettui collects no system metrics for it."""

    def __init__(self) -> None:
        self._said = False

    def on(self, sampling_interval: int = 1, samples_per_report: int = 10) -> None:
        if not self._said:
            log.info("ctx.profiler.on(): dettui does not collect profiler metrics")
            self._said = True

    def off(self) -> None:
        pass


class ExperimentalCoreContext:
    """Determined's `ctx.experimental`: link the checkpoint (or model version) this trial uses
    to it, so `Checkpoint.get_metrics()` finds this trial's metrics."""

    def __init__(self, session: Session | None, trial_id: int) -> None:
        self._session = session
        self._trial_id = trial_id

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        self._report(checkpoint.uuid)

    def report_task_using_model_version(self, model_version: Any) -> None:
        self._report(model_version.checkpoint.uuid)

    def _report(self, uuid: str) -> None:
        if self._session is None:
            return
        self._session.post("/api/v1/trial-source-info", {"trialSourceInfo": {
            "checkpointUuid": uuid, "trialId": self._trial_id,
            "trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}})


class Context:
    def __init__(self, *, info: ClusterInfo | None, distributed: DistributedContext,
                 train: Any, checkpoint: CheckpointContext, preempt: Any, searcher: Any,
                 session: Session | None = None) -> None:
        self.info = info
        self.distributed = distributed
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.searcher = searcher
        self.profiler = ProfilerContext()
        self.experimental = ExperimentalCoreContext(
            session, info.trial.trial_id if info is not None else 0)
        self._session = session

    def __enter__(self) -> Context:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, InvalidHP) and self._session is not None and self.info is not None:
            self._session.post(f"/api/v1/trials/{self.info.trial.trial_id}/early_exit",
                               {"reason": "EXITED_REASON_INVALID_HP"})
            self.close()
            raise SystemExit(0)
        self.close()

    def close(self) -> None:
        self.preempt.close()
        self.train.close()
        self.distributed.close()  # as Determined: its sockets end with the context


def _default_checkpoint_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("dettui")) / "checkpoints"


def dummy_context(distributed: DistributedContext,
                  storage: str | Path | None = None) -> Context:
    """A Context off any cluster (what `init()` gives there), whatever the environment says."""
    return _dummy(distributed, storage)


def _dummy(distributed: DistributedContext, storage: str | Path | None) -> Context:
    base = Path(storage) if storage else _default_checkpoint_dir()
    log.info("dettui.core: not on a cluster; metrics are logged, checkpoints go to %s", base)
    return Context(info=None, distributed=distributed, train=DummyTrainContext(),
                   checkpoint=CheckpointContext(base, distributed), preempt=DummyPreemptContext(),
                   searcher=DummySearcherContext())
