"""Records -> Determined's wire shapes (camelCase, every field emitted)."""

from __future__ import annotations

import time
from typing import Any

import yaml

from dettui import DETERMINED_VERSION
from dettui.master.http.wire import encode_metrics, encode_number, ts
from dettui.master.searcher import sanity
from dettui.master.store.records import (
    Checkpoint,
    Experiment,
    ListedExperiment,
    LogLine,
    Metric,
    Trial,
)

LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def experiment(e: Experiment) -> dict[str, Any]:
    searcher = e.config.get("searcher") or {}
    return {**_experiment(e, e.config.get("hyperparameters", {}), searcher.get("metric")),
            "config": e.config, "originalConfig": e.original_config}


def listed_experiment(e: ListedExperiment) -> dict[str, Any]:
    """`experiment` without `config` and `originalConfig` (a list that omits them)."""
    return _experiment(e, e.hyperparameters, e.searcher_metric)


def _experiment(e: Experiment | ListedExperiment, hyperparameters: Any,
                searcher_metric: str | None) -> dict[str, Any]:
    return {
        "id": e.id,
        "name": e.name,
        "description": e.description or "",
        "labels": e.labels,
        "state": e.state.value,
        "archived": e.archived,
        "searcherType": e.searcher_type,
        "jobId": e.job_id,
        "numTrials": e.num_trials,
        "startTime": ts(e.start_time),
        "endTime": ts(e.end_time),
        "progress": e.progress,
        "username": e.username,
        "userId": e.owner_id,
        "displayName": e.username,
        "resourcePool": e.resource_pool,
        "projectId": 1,
        "projectOwnerId": 1,
        "projectName": "Uncategorized",
        "workspaceId": 1,
        "workspaceName": "Uncategorized",
        "parentArchived": False,
        "forkedFrom": None,
        "notes": "",
        "unmanaged": e.unmanaged,
        "externalExperimentId": e.external_id,
        "hyperparameters": hyperparameters,
        # kept on the experiment's row by each checkpoint report, deletion and GC
        "checkpointSize": str(e.checkpoint_size),
        "checkpointCount": e.checkpoint_count,
        # filled in for one experiment (GET /api/v1/experiments/{id}: routes.views.extras);
        # a list shows `duration` of ended experiments only (it would change every second)
        "trialIds": [],
        "duration": None if e.end_time is None else duration(e.start_time, e.end_time),
        "bestTrialId": e.best_trial_id,
        "searcherMetric": searcher_metric,
        "bestTrialSearcherMetric": e.best,
        "warnings": sanity.shown(e.warnings, e.state, e.best, e.num_trials, e.unmanaged,
                                 searcher_metric),  # dettui's: what the search lacks
    }


def duration(start: float, end: float | None) -> int:
    """Seconds from start to end (or now, while it runs), as Determined's `duration`."""
    return max(0, int((end if end is not None else time.time()) - start))


def workload(m: Metric | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "endTime": ts(m.report_time),
        "totalBatches": m.steps_completed,
        "numInputs": 0,
        "state": "STATE_COMPLETED",
        "metrics": {"avgMetrics": encode_metrics(m.metrics), "batchMetrics": m.batch_metrics},
    }


def trial(
    t: Trial, *, latest_validation: Metric | None = None, best_validation: Metric | None = None,
    latest_training: Metric | None = None, best_checkpoint: Checkpoint | None = None,
    searcher_metric: str | None = None, allocation_ids: list[str] | None = None,
    summary_metrics: dict[str, Any] | None = None, checkpoints: list[Checkpoint] | None = None,
) -> dict[str, Any]:
    kept = [c for c in checkpoints or () if c.state.value in KEPT_STATES]
    smv = None
    if latest_validation is not None and searcher_metric:
        smv = latest_validation.metrics.get(searcher_metric)
    return {
        "id": t.id,
        "experimentId": t.experiment_id,
        "hparams": finite_json(t.hparams),
        "state": t.state.value,
        "restarts": t.restarts,
        "startTime": ts(t.start_time),
        "endTime": ts(t.end_time),
        "totalBatchesProcessed": t.total_batches,
        "taskId": t.task_id,
        "taskIds": [t.task_id],
        "runnerState": t.runner_state,
        "latestValidation": workload(latest_validation),
        "bestValidation": workload(best_validation),
        "latestTraining": workload(latest_training),
        "bestCheckpoint": checkpoint_workload(best_checkpoint),
        "searcherMetricValue": smv,
        "summaryMetrics": summary_metrics,
        "checkpointCount": len(kept),
        "totalCheckpointSize": str(sum(resources_size(c.resources) for c in kept)),
        "warmStartCheckpointUuid": None,
        "wallClockTime": ((t.end_time or 0) - t.start_time) if t.end_time else None,
        "progress": t.progress,
        "seed": t.seed,
        "runId": t.run_id,
        "allocationIds": allocation_ids or [],
    }


KEPT_STATES = ("STATE_COMPLETED", "STATE_PARTIALLY_DELETED")  # checkpoints holding files


def finite_json(value: Any) -> Any:
    """`value` (hyperparameters) with each float that is not finite as the metrics carry one,
    the strings "NaN", "Infinity" and "-Infinity": JSON has no token for them (`json` wrote a
    bare, invalid `Infinity`; orjson a `null` that loses it). (Determined cannot store them at
    all: its master refuses the experiment.)"""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return encode_number(value)


def resources_size(resources: dict[str, str]) -> int:
    """A checkpoint's bytes: its resources' sizes (strings of integers)."""
    total = 0
    for size in resources.values():
        try:
            total += int(size)
        except (TypeError, ValueError):
            continue
    return total


def checkpoint_workload(c: Checkpoint | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"uuid": c.uuid, "endTime": ts(c.report_time), "state": c.state.value,
            "totalBatches": c.steps_completed or 0, "resources": c.resources}


def checkpoint(
    c: Checkpoint, *, hparams: dict[str, Any] | None = None,
    validation: Metric | None = None, searcher_metric: str | None = None,
    config: dict[str, Any] | None = None, training: Metric | None = None,
) -> dict[str, Any]:
    """Determined's v1Checkpoint; `training` carries what the SDK reads (experimentConfig,
    hparams, the metrics reported at the checkpoint's step)."""
    val = encode_metrics(validation.metrics) if validation else None
    train = encode_metrics(training.metrics) if training else None
    return {
        "uuid": c.uuid,
        "taskId": c.task_id,
        "allocationId": c.allocation_id,
        "reportTime": ts(c.report_time),
        "resources": c.resources,
        "metadata": c.metadata,
        "state": c.state.value,
        "storageId": c.storage_id,
        "training": {
            "trialId": c.trial_id,
            "experimentId": c.experiment_id,
            "experimentConfig": config,
            "hparams": finite_json(hparams),
            "validationMetrics": {"avgMetrics": val, "batchMetrics": None}
            if val is not None else None,
            "searcherMetric": (validation.metrics.get(searcher_metric)
                               if validation and searcher_metric else None),
            "trainingMetrics": {"avgMetrics": train, "batchMetrics": training.batch_metrics}
            if training is not None else None,
        },
    }


def log_line(line: LogLine) -> dict[str, Any]:
    return {
        "id": str(line.id),
        "trialId": line.trial_id,
        "taskId": line.task_id,
        "allocationId": line.allocation_id,
        "timestamp": ts(line.timestamp),
        "level": f"LOG_LEVEL_{line.level}" if line.level else "LOG_LEVEL_UNSPECIFIED",
        "message": message(line),
        "log": line.log,
        "rankId": line.rank_id,
        "agentId": line.agent_id,
        "containerId": line.container_id,
        "source": line.source,
        "stdtype": line.stdtype,
    }


def task_log_line(line: LogLine) -> dict[str, Any]:
    """Determined's v1TaskLogsResponse (`det task logs`)."""
    out = log_line(line)
    out.pop("trialId")
    return out


def message(line: LogLine) -> str:
    """Determined's TaskLog.Message: `[ts] cid8 [rank=N] || LEVEL: text`."""
    parts = [f"[{ts(line.timestamp)}]", (line.container_id or "")[:8].ljust(8)]
    if line.rank_id is not None:
        parts.append(f"[rank={line.rank_id}]")
    parts.append("||")
    if line.level:
        parts.append(f"{line.level}:")
    text = line.log if line.log.endswith("\n") else line.log + "\n"
    return " ".join(parts) + " " + text


def master_info(cluster_id: str, cluster_name: str) -> dict[str, Any]:
    return {
        "version": DETERMINED_VERSION,
        "masterId": cluster_id,
        "clusterId": cluster_id,
        "clusterName": cluster_name,
        "telemetryEnabled": False,
        "hasCustomLogo": False,
        "strictJobQueueControl": False,
        "product": "PRODUCT_UNSPECIFIED",  # an enum in the real client (not Cloud)
        "branding": "determined",
        "rbacEnabled": False,
        "userManagementEnabled": True,
        "featureSwitches": [],
    }


def config_yaml(config: dict[str, Any]) -> str:
    return str(yaml.safe_dump(config, sort_keys=False))


def metrics_report(m: Metric, index: int) -> dict[str, Any]:
    """A v1MetricsReport: the SDK reads `metrics["avg_metrics"]`, or `["validation_metrics"]`
    for the validation group (Determined's legacy layout)."""
    avg = encode_metrics(m.metrics)
    body: dict[str, Any] = {"avg_metrics": avg, "batch_metrics": m.batch_metrics}
    if m.group == "validation":
        body["validation_metrics"] = avg
    return {"id": f"{m.trial_id}.{m.group}.{m.steps_completed}.{index}", "trialId": m.trial_id,
            "trialRunId": m.run_id, "totalBatches": m.steps_completed, "group": m.group,
            "endTime": ts(m.report_time), "archived": False, "metrics": body}
