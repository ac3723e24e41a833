"""TrainContext: metrics and progress, sent by a background thread and flushed on close."""

from __future__ import annotations

import enum
import logging
import math
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dettui.core._info import ClusterInfo
from dettui.core._session import Session
from dettui.core._tensorboard import MetricWriter, metric_writer
from dettui.errors import InvalidArgument, NotFound

log = logging.getLogger("dettui.core")


def _check_group(group: str) -> None:
    if not group or "." in group:
        raise ValueError(f"invalid metric group {group!r}: must be non-empty, without '.'")


def check_validation(metrics: dict[str, Any]) -> dict[str, Any]:
    """Determined drops bytes values and refuses values that are not scalars."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bytes):
            continue
        if not isinstance(value, int | float | str | bool) and not hasattr(value, "item"):
            raise ValueError(f"Validation metric '{key}' returned an invalid scalar value: "
                             f"{value!r}")
        out[key] = value.item() if hasattr(value, "item") else value
    return out


def _plain(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in metrics.items()}


class TensorboardMode(enum.Enum):
    """Determined's `core.init(tensorboard_mode=...)`: AUTO writes reported training and
    validation metrics as TensorBoard events (`_tensorboard`); MANUAL leaves the directory to
    the trial. Nothing is uploaded either way: the directory is in checkpoint storage."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"  # the master refuses it


def tensorboard_path(base: Path, info: ClusterInfo) -> Path:
    """Where a trial's TensorBoard files go: Determined's layout under the storage base."""
    return (Path(base) / info.cluster_id / "tensorboard" / "experiment" /
            str(info.trial.experiment_id) / "trial" / str(info.trial.trial_id))


class _RunMetadata:
    """`set_metadata`/`get_metadata`: the run's metadata on the master (Determined's
    `/api/v1/runs/{id}/metadata`), or kept here off a cluster."""

    _session: Session | None
    _info: ClusterInfo | None
    _metadata: dict[str, Any] | None = None

    def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the run's metadata; what the master stored."""
        if self._session is None or self._info is None:
            self._metadata = dict(metadata)
            return dict(metadata)
        trial_id = self._info.trial.trial_id
        answer = self._session.post(f"/api/v1/runs/{trial_id}/metadata",
                                    {"metadata": metadata, "runId": trial_id})
        return answer.get("metadata")

    def get_metadata(self) -> dict[str, Any] | None:
        if self._session is None or self._info is None:
            return None if self._metadata is None else dict(self._metadata)
        return self._session.get(f"/api/v1/runs/{self._info.trial.trial_id}/metadata").get(
            "metadata")


QUEUE_LIMIT = 10_000  # reports waiting to be sent; the training loop waits beyond this
BATCH_LIMIT = 1000  # reports sent in one request


class TrainContext(_RunMetadata):
    """Reports go to a bounded queue that a background thread drains: what has piled up while
    one request was in flight goes in the next as one batch (`/metrics/batch`), so a loop
    that reports every step costs one request per round trip, not per step; and a full queue
    makes the loop wait (back-pressure) instead of growing without bound."""

    def __init__(self, session: Session, info: ClusterInfo, is_chief: bool = True,
                 tensorboard: Path | None = None,
                 tensorboard_mode: TensorboardMode = TensorboardMode.AUTO) -> None:
        self._session: Session = session
        self._info: ClusterInfo = info
        self._is_chief = is_chief
        self._tensorboard = tensorboard
        self._tensorboard_mode = TensorboardMode(tensorboard_mode)
        self._events: MetricWriter | None = (
            metric_writer(tensorboard) if self._tensorboard_mode == TensorboardMode.AUTO
            else None)
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue(maxsize=QUEUE_LIMIT)
        self._error: BaseException | None = None
        self._batches = True  # the master takes /metrics/batch (an older one may not)
        self._thread = threading.Thread(target=self._run, name="dettui-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while len(items) < BATCH_LIMIT:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write_events([i for i in items if i is not None])
                self._send([i for i in items if i is not None])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
                self._error = exc
            finally:
                for _ in items:
                    self._queue.task_done()
            if None in items:
                return

    def _write_events(self, items: list[tuple[str, Any]]) -> None:
        """The metric reports as TensorBoard events; a failure here (a full disk, a broken
        tensorboard install) is logged once and ends the events, not the trial."""
        if self._events is None:
            return
        try:
            for path, body in items:
                if path.endswith("/metrics"):
                    m = body["metrics"]
                    self._events.write(body["group"], m["stepsCompleted"],
                                       m["metrics"]["avgMetrics"], m["metrics"]["batchMetrics"])
            self._events.flush()
        except Exception as exc:  # noqa: BLE001 - TensorBoard events are a convenience
            log.warning("TensorBoard events are no longer written: %s", exc)
            self._events.close()
            self._events = None

    def _send(self, items: list[tuple[str, Any]]) -> None:
        """In order: runs of metric reports as batches; of the progress reports in a row only
        the last (each replaces the one before)."""
        run: list[Any] = []
        for i, (path, body) in enumerate(items):
            if path.endswith("/metrics"):
                run.append(body)
                continue
            self._send_reports(run)
            run = []
            nxt = items[i + 1][0] if i + 1 < len(items) else None
            if not (path.endswith("/progress") and nxt == path):
                self._session.post(path, body)
        self._send_reports(run)

    def _send_reports(self, reports: list[Any]) -> None:
        if not reports:
            return
        path = f"/api/v1/trials/{self._info.trial.trial_id}/metrics"
        if len(reports) > 1 and self._batches:
            try:
                answer = self._session.post(path + "/batch", {"reports": reports})
            except NotFound:
                self._batches = False
            else:
                refused = answer.get("refused") or []
                final = [r for r in refused if not r.get("retryAfter")]
                if final:
                    raise InvalidArgument(str(final[0].get("message")))
                # refused only for now (the master's disk filled up between two of its
                # groups): sent again, waiting as a 503 makes the session wait
                self._send_reports([reports[r["index"]] for r in refused])
                return
        for body in reports:
            self._session.post(path, body)

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any],
                       batch_metrics: list[dict[str, Any]] | None = None) -> None:
        _check_group(group)
        self._raise_pending()
        trial = self._info.trial
        body = {"group": group, "metrics": {
            "trialId": trial.trial_id, "trialRunId": trial.trial_run_id,
            "stepsCompleted": int(steps_completed),
            "reportTime": datetime.now(UTC).isoformat(),
            "metrics": {"avgMetrics": _plain(metrics), "batchMetrics": batch_metrics}}}
        self._queue.put((f"/api/v1/trials/{trial.trial_id}/metrics", body))

    def report_training_metrics(self, steps_completed: int, metrics: dict[str, Any],
                                batch_metrics: list[dict[str, Any]] | None = None) -> None:
        self.report_metrics("training", steps_completed, metrics, batch_metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        self.report_metrics("validation", steps_completed, check_validation(metrics))

    def report_progress(self, progress: float) -> None:
        if not 0 <= progress <= 1 or math.isnan(progress):
            raise ValueError(f"progress must be between 0 and 1, got {progress}")
        self._raise_pending()
        self._queue.put((f"/api/v1/trials/{self._info.trial.trial_id}/progress",
                         {"progress": float(progress), "is_raw": True}))

    def get_experiment_best_validation(self) -> float | None:
        from dettui.errors import NotFound

        try:
            body = self._session.get(f"/api/v1/experiments/{self._info.trial.experiment_id}"
                                     "/searcher/best_searcher_validation_metric")
        except NotFound:
            return None
        return float(body["metric"])

    def set_status(self, status: str) -> None:
        self._queue.put((f"/api/v1/trials/{self._info.trial.trial_id}/runner/metadata",
                         {"state": status}))

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Tell the master why the trial ends early (INVALID_HP; `InvalidHP` escaping
        `with core.init()` does this itself)."""
        body = {"reason": EarlyExitReason(reason).value}
        try:
            self._session.post(f"/api/v1/trials/{self._info.trial.trial_id}/early_exit", body)
        except InvalidArgument as exc:
            log.warning("early exit not recorded: %s", exc.message)

    def get_tensorboard_path(self) -> Path:
        """The trial's TensorBoard directory, in checkpoint storage (Determined's layout)."""
        if self._tensorboard is None:
            raise ValueError("this context has no TensorBoard path")
        return self._tensorboard

    def upload_tensorboard_files(self, selector: Callable[[Path], bool] = lambda _: True,
                                 mangler: Callable[[Path, int], Path] = lambda p, _: p) -> None:
        """Determined's MANUAL-mode upload: nothing to copy, the directory is in storage."""
        if self._tensorboard_mode == TensorboardMode.AUTO:
            raise RuntimeError("upload_tensorboard_files can only be used in MANUAL mode")

    def close(self) -> None:
        self._queue.join()
        self._queue.put(None)
        self._thread.join(timeout=60)
        if self._events is not None:
            self._events.close()
        self._raise_pending()


class DummyTrainContext(_RunMetadata):
    """Off-cluster (and on non-chief ranks): metrics are logged and kept in `reports` for
    inspection. Run metadata goes to the master when a session is given (other ranks)."""

    def __init__(self, tensorboard: Path | None = None, session: Session | None = None,
                 info: ClusterInfo | None = None) -> None:
        self.reports: list[tuple[str, int, dict[str, Any]]] = []
        self.progress: float | None = None
        self._tensorboard = tensorboard
        self._session = session
        self._info = info

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any],
                       batch_metrics: list[dict[str, Any]] | None = None) -> None:
        _check_group(group)
        self.reports.append((group, int(steps_completed), _plain(metrics)))
        log.info("%s metrics at step %d: %s", group, steps_completed, _plain(metrics))

    def report_training_metrics(self, steps_completed: int, metrics: dict[str, Any],
                                batch_metrics: list[dict[str, Any]] | None = None) -> None:
        self.report_metrics("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        self.report_metrics("validation", steps_completed, check_validation(metrics))

    def report_progress(self, progress: float) -> None:
        if not 0 <= progress <= 1 or math.isnan(progress):
            raise ValueError(f"progress must be between 0 and 1, got {progress}")
        self.progress = progress

    def get_experiment_best_validation(self) -> float | None:
        return None

    def set_status(self, status: str) -> None:
        pass

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        log.info("report_early_exit(%s)", EarlyExitReason(reason).name)

    def get_tensorboard_path(self) -> Path:
        return self._tensorboard or Path("tensorboard").resolve()

    def upload_tensorboard_files(self, selector: Callable[[Path], bool] = lambda _: True,
                                 mangler: Callable[[Path, int], Path] = lambda p, _: p) -> None:
        log.info("upload_tensorboard_files()")

    def close(self) -> None:
        pass
