-- A detached experiment's external id is its owner's name for it (issue 29, review): it was
-- unique over the whole master, so bob's PUT by-external-id/run-1 handed alice's later run-1
-- to bob's experiment. Now the same external id names one experiment per owner, and a PUT
-- finds only the caller's own. Existing ids were unique, so they stay unique per owner.
DROP INDEX experiments_external_id;
CREATE UNIQUE INDEX experiments_owner_external_id ON experiments(owner_id, external_id)
    WHERE external_id IS NOT NULL;
