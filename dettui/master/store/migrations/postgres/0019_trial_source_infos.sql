-- Which checkpoint a trial uses (Determined's trial_source_infos): an inference or fine-tuning
-- trial reports it (`core.experimental.report_task_using_checkpoint`), and the checkpoint's
-- metrics route (`Checkpoint.get_metrics()`) then finds that trial's metrics.
CREATE TABLE trial_source_infos (
    trial_id BIGINT NOT NULL REFERENCES trials(id),
    checkpoint_uuid TEXT COLLATE "C" NOT NULL REFERENCES checkpoints(uuid),
    kind TEXT NOT NULL,
    model_id BIGINT,
    model_version BIGINT,
    PRIMARY KEY (trial_id, checkpoint_uuid)
);
CREATE INDEX trial_source_infos_checkpoint ON trial_source_infos(checkpoint_uuid);
