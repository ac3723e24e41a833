-- Paged reads (offset/limit) walk an index in the list's order, so that a page costs the
-- page, not the table: experiments by owner, trials by state (the job queue's counts),
-- checkpoints of an experiment or trial by report time, a trial's metrics by step.
CREATE INDEX experiments_owner ON experiments(owner_id, id);
CREATE INDEX experiments_state ON experiments(state, id);
CREATE INDEX trials_state ON trials(state, experiment_id);
CREATE INDEX checkpoints_experiment_time ON checkpoints(experiment_id, report_time, uuid);
CREATE INDEX checkpoints_trial_time ON checkpoints(trial_id, report_time, uuid);
CREATE INDEX metrics_trial_steps ON metrics(trial_id, archived, steps_completed, id);
-- with `archived` in the key, skipping OFFSET rows and counting stay inside the index
CREATE INDEX metrics_trial_live ON metrics(trial_id, grp, archived, steps_completed);
DROP INDEX metrics_trial;
DROP INDEX checkpoints_trial;
