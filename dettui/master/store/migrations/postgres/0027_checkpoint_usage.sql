-- An experiment's checkpoint storage use, kept on its row (as SQLite's 0027): the bytes and
-- number of its checkpoints that still hold files, changed with each report, deletion and GC.
ALTER TABLE experiments ADD COLUMN checkpoint_size BIGINT NOT NULL DEFAULT 0;
ALTER TABLE experiments ADD COLUMN checkpoint_count BIGINT NOT NULL DEFAULT 0;
UPDATE experiments e SET checkpoint_count = k.n, checkpoint_size = k.bytes FROM (
    SELECT c.experiment_id, COUNT(*) AS n, LEAST(COALESCE(SUM((
        SELECT SUM(CASE WHEN r.value ~ '^[0-9]{1,18}$' THEN r.value::bigint ELSE 0 END)
        FROM json_each_text(c.resources::json) r)), 0), 4611686018427387904)::bigint AS bytes
    FROM checkpoints c
    WHERE c.experiment_id IS NOT NULL
    AND c.state IN ('STATE_COMPLETED', 'STATE_PARTIALLY_DELETED')
    GROUP BY c.experiment_id) k
WHERE e.id = k.experiment_id;
