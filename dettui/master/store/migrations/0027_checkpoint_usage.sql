-- An experiment's checkpoint storage use, kept on its row as Determined keeps it
-- (checkpoint_size, checkpoint_count): the bytes and number of its checkpoints that still hold
-- files (COMPLETED or PARTIALLY_DELETED), changed in the same transaction as each report,
-- deletion and GC (store.checkpoints), so a list shows it and a quota checks it without
-- reading a checkpoint. A file's size counts if it is a string of at most 18 decimal digits.
ALTER TABLE experiments ADD COLUMN checkpoint_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE experiments ADD COLUMN checkpoint_count INTEGER NOT NULL DEFAULT 0;
UPDATE experiments SET
    checkpoint_count = (
        SELECT COUNT(*) FROM checkpoints c WHERE c.experiment_id = experiments.id
        AND c.state IN ('STATE_COMPLETED', 'STATE_PARTIALLY_DELETED')),
    checkpoint_size = (
        SELECT CAST(MIN(TOTAL(CASE WHEN CAST(r.value AS TEXT) GLOB '[0-9]*'
                        AND NOT CAST(r.value AS TEXT) GLOB '*[^0-9]*'
                        AND length(CAST(r.value AS TEXT)) <= 18
                        THEN CAST(r.value AS INTEGER) ELSE 0 END),
                   4611686018427387904) AS INTEGER)
        FROM checkpoints c, json_each(c.resources) r WHERE c.experiment_id = experiments.id
        AND c.state IN ('STATE_COMPLETED', 'STATE_PARTIALLY_DELETED'));
