-- An experiment's slots per trial in a column of its own (fixed at creation; `e continue` may
-- set it again with the config): the job queue, the stream's job windows and the scheduling
-- pass read it for every live experiment, which decoding each config made their hot spot.
ALTER TABLE experiments ADD COLUMN slots_per_trial INTEGER NOT NULL DEFAULT 1;
UPDATE experiments SET slots_per_trial =
    COALESCE(json_extract(config, '$.resources.slots_per_trial'), 1);
