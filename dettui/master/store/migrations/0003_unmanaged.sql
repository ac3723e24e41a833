-- Detached (unmanaged) experiments and trials, run by scripts outside the cluster (WIRE §8):
-- external ids to find them again (resume by name), and each trial's last heartbeat.
ALTER TABLE experiments ADD COLUMN external_id TEXT;
CREATE UNIQUE INDEX experiments_external_id ON experiments(external_id)
    WHERE external_id IS NOT NULL;
ALTER TABLE trials ADD COLUMN external_id TEXT;
CREATE UNIQUE INDEX trials_external_id ON trials(experiment_id, external_id)
    WHERE external_id IS NOT NULL;
ALTER TABLE trials ADD COLUMN last_activity REAL;
