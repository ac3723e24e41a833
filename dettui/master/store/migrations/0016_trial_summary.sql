-- Each trial's summary metrics (Determined's summaryMetrics) and its best validation of the
-- searcher metric, kept up to date by the reports themselves, so that a trial view reads them
-- in O(1) instead of folding every report. Trials stored by older versions are
-- `summary_stale` until the master's start-up computes them once.
ALTER TABLE trials ADD COLUMN summary_metrics TEXT;
ALTER TABLE trials ADD COLUMN best_value REAL;
ALTER TABLE trials ADD COLUMN best_steps INTEGER;
ALTER TABLE trials ADD COLUMN summary_stale INTEGER NOT NULL DEFAULT 1;
UPDATE trials SET summary_stale = 0
    WHERE NOT EXISTS (SELECT 1 FROM metrics m WHERE m.trial_id = trials.id);
