-- Model contexts (up to 95 MiB each) leave the experiments rows: every list, scheduling pass
-- and stream read touches those rows, and only the agent's download and model_def read the
-- context.
CREATE TABLE contexts (
    experiment_id INTEGER PRIMARY KEY REFERENCES experiments(id),
    targz BLOB NOT NULL
);
INSERT INTO contexts (experiment_id, targz)
    SELECT id, context FROM experiments WHERE context IS NOT NULL;
ALTER TABLE experiments DROP COLUMN context;
