-- Which checkpoint a trial uses (Determined's trial_source_infos): an inference or fine-tuning
-- trial reports it (`core.experimental.report_task_using_checkpoint`), and the checkpoint's
-- metrics route (`Checkpoint.get_metrics()`) then finds that trial's metrics.
CREATE TABLE trial_source_infos (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    checkpoint_uuid TEXT NOT NULL REFERENCES checkpoints(uuid),
    kind TEXT NOT NULL,              -- TRIAL_SOURCE_INFO_TYPE_*
    model_id INTEGER,
    model_version INTEGER,
    PRIMARY KEY (trial_id, checkpoint_uuid)
);
CREATE INDEX trial_source_infos_checkpoint ON trial_source_infos(checkpoint_uuid);
