-- Log lines shipped by agents carry their number within the agent's part of the allocation: a
-- line sent again (the agent retried after a master restart) is stored once.
ALTER TABLE logs ADD COLUMN seq INTEGER;
CREATE UNIQUE INDEX logs_allocation_seq ON logs(allocation_id, agent_id, seq)
    WHERE seq IS NOT NULL;
