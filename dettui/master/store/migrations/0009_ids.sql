-- The last experiment and trial ids given, so that deleting the newest never frees its id.
INSERT OR IGNORE INTO cluster (key, value)
    SELECT 'last_id:experiments', CAST(COALESCE(MAX(id), 0) AS TEXT) FROM experiments;
INSERT OR IGNORE INTO cluster (key, value)
    SELECT 'last_id:trials', CAST(COALESCE(MAX(id), 0) AS TEXT) FROM trials;
