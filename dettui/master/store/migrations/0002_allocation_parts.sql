-- Allocations spanning agents: every (agent, slots) part in rank order, chief first, and the
-- exit each part reported.
ALTER TABLE allocations ADD COLUMN parts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE allocations ADD COLUMN part_exits TEXT NOT NULL DEFAULT '{}';
ALTER TABLE allocations ADD COLUMN port INTEGER;
