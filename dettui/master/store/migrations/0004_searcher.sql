-- Searchers (grid, random, ASHA): the searcher's whole state, saved with every event it
-- takes, and each trial's id within its searcher.
ALTER TABLE experiments ADD COLUMN searcher_state TEXT;
ALTER TABLE trials ADD COLUMN search_id INTEGER;
ALTER TABLE trials ADD COLUMN early_exit TEXT;
