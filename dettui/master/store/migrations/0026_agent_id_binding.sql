-- An agent id is bound to at most one live credential (issue 29: a fresh credential joined
-- under the id of a running agent and forged its exits). Where several live credentials were
-- bound to one id, the oldest keeps it and the later ones are revoked (an agent still using
-- one is refused; an admin issues it a new credential after revoking the holder).
UPDATE agent_credentials SET revoked = 1
WHERE revoked = 0 AND agent_id IS NOT NULL AND id > (
    SELECT MIN(c.id) FROM agent_credentials c
    WHERE c.agent_id = agent_credentials.agent_id AND c.revoked = 0);
CREATE UNIQUE INDEX agent_credentials_live_agent ON agent_credentials(agent_id)
    WHERE revoked = 0;
