-- Metric ingest in O(1): the older runs' reports a run's report archives (SEMANTICS §3.2) are
-- archived once per run and lowest step, not scanned on every report. `rolled_back_run` and
-- `rolled_back_step` say how far that has been done for the trial.
ALTER TABLE trials ADD COLUMN rolled_back_run INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN rolled_back_step INTEGER NOT NULL DEFAULT 0;
