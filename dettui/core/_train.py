"""TrainContext: metrics and progress, sent by a background thread and flushed on close."""

from __future__ import annotations

import logging
import math
import queue
import threading
from datetime import UTC, datetime
from typing import Any

from dettui.core._info import ClusterInfo
from dettui.core._session import Session

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


class TrainContext:
    def __init__(self, session: Session, info: ClusterInfo, is_chief: bool = True) -> None:
        self._session = session
        self._info = info
        self._is_chief = is_chief
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="dettui-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                path, body = item
                self._session.post(path, body)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the training thread
                self._error = exc
            finally:
                self._queue.task_done()

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

    def close(self) -> None:
        self._queue.join()
        self._queue.put(None)
        self._thread.join(timeout=60)
        self._raise_pending()


class DummyTrainContext:
    """Off-cluster: metrics are logged and kept in `reports` for inspection."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, int, dict[str, Any]]] = []
        self.progress: float | None = None

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

    def close(self) -> None:
        pass
