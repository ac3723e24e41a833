-- A run's (trial's) metadata, as `core.train.set_metadata` sets it (Determined's
-- POST /api/v1/runs/{id}/metadata): a JSON object, replaced whole on each set.
ALTER TABLE trials ADD COLUMN metadata TEXT;
