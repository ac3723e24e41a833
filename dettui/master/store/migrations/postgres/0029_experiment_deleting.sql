-- An experiment being deleted (issue 30): its files go between two commits, so the first marks
-- it; `continue` refuses a marked experiment, and start-up finishes a deletion a crash cut.
ALTER TABLE experiments ADD COLUMN deleting BIGINT NOT NULL DEFAULT 0;
