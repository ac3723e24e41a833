-- An admin's `det agent disable --drain` (running work finishes, no new work) and the slots
-- disabled one by one (`det slot disable`), kept across master restarts.
ALTER TABLE agents ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN disabled_slots TEXT NOT NULL DEFAULT '[]';
