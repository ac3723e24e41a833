-- A user's linked agent user (Determined's agentUserGroup, `det user link-with-agent-user`):
-- the Unix user and group its trials run as on the agents. All four set, or all four NULL
-- (unlinked: the agent's default trial user).
ALTER TABLE users ADD COLUMN agent_uid INTEGER;
ALTER TABLE users ADD COLUMN agent_gid INTEGER;
ALTER TABLE users ADD COLUMN agent_user TEXT;
ALTER TABLE users ADD COLUMN agent_group TEXT;
