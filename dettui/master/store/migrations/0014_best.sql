-- Each experiment's best validation of its searcher metric (by dettui.metric's rules), kept
-- up to date by the validation reports themselves, so that lists read it for free. Rows of
-- older versions are `best_stale` until the master's start-up computes them once.
ALTER TABLE experiments ADD COLUMN best_value REAL;
ALTER TABLE experiments ADD COLUMN best_trial_id INTEGER;
ALTER TABLE experiments ADD COLUMN best_stale INTEGER NOT NULL DEFAULT 1;
UPDATE experiments SET best_stale = 0
    WHERE NOT EXISTS (SELECT 1 FROM trials t JOIN metrics m ON m.trial_id = t.id
                      WHERE t.experiment_id = experiments.id AND m.grp = 'validation');
