-- A user's linked agent user (Determined's agentUserGroup, as SQLite's 0025): all four set, or
-- all four NULL (unlinked: the agent's default trial user).
ALTER TABLE users ADD COLUMN agent_uid BIGINT;
ALTER TABLE users ADD COLUMN agent_gid BIGINT;
ALTER TABLE users ADD COLUMN agent_user TEXT;
ALTER TABLE users ADD COLUMN agent_group TEXT;
