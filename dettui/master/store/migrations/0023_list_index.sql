-- The experiments list's order (id) with what filters it (archived, state, owner) as a narrow
-- index: a page's ids are a walk of offset + limit index entries, and its total an index count,
-- not a walk of the experiments' rows (each holds its config: a page of 100 at offset 9,900
-- read 5,000 table pages).
CREATE INDEX experiments_list ON experiments(id, archived, state, owner_id);
