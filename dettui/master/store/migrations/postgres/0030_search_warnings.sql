-- Search sanity (issue 31): an experiment's warnings (a JSON list of texts: validations that
-- lack the searcher's metric, an adaptive search that cannot rank), and which trials' logs
-- were told already (once per trial).
ALTER TABLE experiments ADD COLUMN warnings TEXT;
ALTER TABLE trials ADD COLUMN metric_warned BIGINT NOT NULL DEFAULT 0;
