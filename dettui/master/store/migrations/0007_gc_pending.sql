-- An experiment that ended and whose checkpoints its GC policy has not been applied to yet:
-- set in the transaction that ends it, cleared once the files are gone, so a master that dies
-- in between collects them when it starts again.
ALTER TABLE experiments ADD COLUMN gc_pending INTEGER NOT NULL DEFAULT 0;
